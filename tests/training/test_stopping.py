"""Stopping a training: the first Ctrl-C asks for a clean stop, the second interrupts at once, and Ctrl-C after that
(while the process unwinds and shuts down) is ignored, so that `longbert train` ends with 130 and no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import longbert.commands
from longbert.commands import run_command as _run
from longbert.errors import LongbertError
from longbert.training.stopping import interrupted, stop_on_signals

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_ctrl_c_interrupts_and_later_ones_are_ignored_until_the_block_ends():
    before = signal.getsignal(signal.SIGINT)
    stop = threading.Event()
    with pytest.raises(KeyboardInterrupt):
        with stop_on_signals(stop):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs in the main thread between bytecodes
            assert stop.is_set(), "the first Ctrl-C asks for a clean stop"
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                pytest.fail("the second Ctrl-C did not interrupt")
            except KeyboardInterrupt:
                assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
                os.kill(os.getpid(), signal.SIGINT)  # a third one while unwinding: ignored
                time.sleep(0.05)
                raise
    assert signal.getsignal(signal.SIGINT) is before, "the caller's handler is back after the block"


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_training_stopped_by_sigterm_exits_143_and_by_ctrl_c_130(signum, status, capsys):
    import typer

    stop = threading.Event()
    with stop_on_signals(stop):
        os.kill(os.getpid(), signum)
        time.sleep(0.05)
        assert stop.is_set()
        error = interrupted("training", 3, Path("run/checkpoint"))  # what the loop raises once it has checkpointed

    def stopped_training():
        raise error

    before = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(typer.Exit) as exited:
            _run(stopped_training)
    finally:
        signal.signal(signal.SIGINT, before)  # _run ignores Ctrl-C from a stop on
    assert exited.value.exit_code == status
    assert capsys.readouterr().err.startswith("stopped: training stopped at step 3")


@pytest.mark.heavy
def test_three_quick_ctrl_c_end_train_with_130_and_no_traceback(tiny_recipe, tmp_path):
    overrides = [o for o in tiny_recipe if not o.startswith("train.epochs")]
    overrides += ["train.epochs=1000", "train.max_steps=1000000", "train.batch_size=2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "LONGBERT_PROGRESS": "0"}
    command = [sys.executable, "-m", "longbert.cli", "train", *[x for o in overrides for x in ("--set", o)]]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "run"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None and not (run_dir / "recipe.yaml").exists():
            time.sleep(0.05)  # recipe.yaml is written just before the first step
        time.sleep(1.0)
        assert process.poll() is None, "train ended before it could be interrupted"
        for _ in range(3):
            process.send_signal(signal.SIGINT)
            time.sleep(0.2)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert "interrupted" in stderr or "stopped:" in stderr, stderr


def test_a_process_of_several_leaves_with_the_status_its_command_has(monkeypatch):
    """Under torchrun a command tears its process group down and leaves at once (gloo's threads would otherwise be
    destroyed unjoined at the interpreter's exit and abort the process): with 0 when it succeeds, with the status of
    its one-line error when it fails; an unexpected error keeps its traceback."""
    import typer

    left = []
    monkeypatch.setattr(longbert.commands, "end_process_group", lambda: True)
    monkeypatch.setattr(longbert.commands, "leave_after_process_group", left.append)

    assert longbert.commands.run_command(lambda: "done") == "done"

    def refused():
        raise LongbertError("no such run")

    with pytest.raises(typer.Exit):
        longbert.commands.run_command(refused)

    def broken():
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        longbert.commands.run_command(broken)
    assert left == [0, 2]
    monkeypatch.setattr(longbert.commands, "end_process_group", lambda: False)  # one process: a normal exit
    longbert.commands.run_command(lambda: None)
    assert left == [0, 2]


@pytest.mark.heavy
def test_a_loss_that_is_not_a_number_stops_the_run_at_its_step_and_writes_no_model(tiny_recipe, monkeypatch):
    """A loss of nan makes every weight nan: the run stops there, in one line naming the step, instead of reporting
    the accuracy of a model of NaNs and writing NaN into its predictions with exit 0."""
    import longbert
    from longbert.training import finetune

    real, calls = finetune._batch_loss, []

    def poisoned(*args, **kwargs):
        calls.append(1)
        loss = real(*args, **kwargs)
        return loss * float("nan") if len(calls) == 2 else loss

    monkeypatch.setattr(finetune, "_batch_loss", poisoned)
    recipe = longbert.load_recipe(None, tiny_recipe)
    stopped = r"^training stopped at step 2: the training loss is nan, not a finite"
    with pytest.raises(LongbertError, match=stopped) as e:
        longbert.train(recipe)
    assert "\n" not in str(e.value)
    run = Path(recipe.output_dir)
    assert not (run / "best").exists() and not list(run.glob("predictions-*")) and not (run / "metrics.json").exists()
