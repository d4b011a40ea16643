"""Checkpoints survive a kill at any moment: a training subprocess is killed (SIGKILL) at each phase of a checkpoint
write, and the run then completes, leaves nothing behind, and ends exactly as an uninterrupted run does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import longbert
from helpers import ONE_STAGE, assert_same_run
from longbert.errors import LongbertError
from longbert.training.checkpoint import save_checkpoint
from longbert.utils.outputs import atomic_folder, recover

pytestmark = pytest.mark.heavy  # trains, resumes or exports models: left out of the 1-minute subset

WEIGHTS = ("checkpoint/model.safetensors", "best/head.safetensors", "best/backbone/model.safetensors")

ROOT = Path(__file__).resolve().parents[2]


def test_recover_puts_back_a_folder_whose_swap_was_cut_and_removes_every_leftover(tmp_path):
    (tmp_path / ".checkpoint.old-123").mkdir()  # killed between the swap's two renames: only the old folder is left
    (tmp_path / ".checkpoint.old-123" / "state.json").write_text("previous")
    (tmp_path / ".checkpoint.staging-abc123").mkdir()  # the new one, maybe half-written
    (tmp_path / "best").mkdir()
    (tmp_path / ".best.old-77").mkdir()  # killed after a swap, before the old folder was removed
    (tmp_path / ".metrics.json.tmp").write_text("{")
    (tmp_path / "notes.txt").write_text("not ours")
    done = recover(tmp_path)
    assert len(done) == 4 and any(line.startswith("restored checkpoint") for line in done)
    assert (tmp_path / "checkpoint" / "state.json").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "checkpoint", "notes.txt"]
    assert recover(tmp_path) == []


def test_atomic_folder_leaves_nothing_but_the_target(tmp_path):
    for text in ("first", "second"):  # "file" marks the folder as this kind's: the second write may replace it
        with atomic_folder(tmp_path / "out", "file") as staging:
            (staging / "file").write_text(text)
    with pytest.raises(RuntimeError), atomic_folder(tmp_path / "out", "file") as staging:
        (staging / "file").write_text("third")
        raise RuntimeError("failed while writing")
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and (tmp_path / "out" / "file").read_text() == "second"


def test_a_checkpoint_never_replaces_a_folder_of_other_files(tmp_path):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    # refused before anything is read from the model or optimiser
    with pytest.raises(LongbertError, match="^checkpoint folder .* already holds files this command did not write "
                                            r"\(it has no state.json\); name a new or empty folder$"):
        save_checkpoint(folder, None, None, None, None, "fingerprint", None)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


# -- killing a training at each phase of a checkpoint write -------------------------------------------------------

# Runs a training; the Nth call of `function` whose path arguments contain `match` kills the process (SIGKILL) before
# the call does anything. Patched from outside, as a crash would strike: the package has no test hooks.
DRIVER = textwrap.dedent("""
    import os, shutil, signal, sys
    import safetensors.torch
    import torch

    torch.set_num_threads(int(os.environ["TORCH_THREADS"]))  # the test process's: the runs it compares must match
    torch.use_deterministic_algorithms(True)

    function, match, nth, *overrides = sys.argv[1:]
    calls = 0

    def kill_at_nth_call(original):
        def wrapper(*args, **kwargs):
            global calls
            if any(match in str(a) for a in args if isinstance(a, (str, os.PathLike))):
                calls += 1
                if calls == int(nth):
                    os.kill(os.getpid(), signal.SIGKILL)
            return original(*args, **kwargs)
        return wrapper

    module = {"save_file": safetensors.torch, "replace": os, "rmtree": shutil}[function]
    setattr(module, function, kill_at_nth_call(getattr(module, function)))

    import longbert
    longbert.train(longbert.load_recipe(None, overrides))
""")

@pytest.fixture(scope="module", autouse=True)
def deterministic():
    """Bit-for-bit comparisons need deterministic kernels (see test_train.deterministic); the driver sets them too."""
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


# Checkpoints at steps 2 and 4 and at the epoch's end (step 4 again); dropout on, so the random state matters.
KILLABLE = ["train.epochs=1", "train.max_steps=4", "train.checkpoint_every_steps=2", "backbone.hidden_dropout=0.1"]


@pytest.fixture(scope="module")
def overrides(tiny_backbone_dir, imdb_slice):
    return [f"backbone.name={tiny_backbone_dir}", f"data.path={imdb_slice}", "data.label_names=[neg, pos]",
            "data.validation_fraction=0.25", "data.max_document_tokens=400", "strategy.name=chunk",
            "strategy.window=62", "train.batch_size=8", "train.learning_rate=1e-3", "train.mixed_precision=no",
            "eval.batch_size=16", *ONE_STAGE,
            *KILLABLE]


@pytest.fixture(scope="module")
def uninterrupted(overrides, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    longbert.train(longbert.load_recipe(None, overrides + [f"output_dir={run_dir}"]))
    return run_dir


PHASES = {
    # phase: (function, path match, nth matching call, what the kill leaves beside checkpoint/ (True: it is there))
    "writing the first checkpoint": ("save_file", "optimizer.safetensors", 1, [".checkpoint.staging-*"], False),
    "writing the second checkpoint": ("save_file", "optimizer.safetensors", 2, [".checkpoint.staging-*"], True),
    "second complete, before the swap": ("replace", ".checkpoint.old-", 1, [".checkpoint.staging-*"], True),
    "between the swap's two renames": ("replace", ".checkpoint.staging-", 2,
                                       [".checkpoint.staging-*", ".checkpoint.old-*"], False),
    "after the swap, before the old one is removed": ("rmtree", ".checkpoint.old-", 1, [".checkpoint.old-*"], True),
}


def kill_during_checkpoint(phase: str, overrides: list[str], run_dir: Path) -> None:
    function, match, nth, left, has_checkpoint = PHASES[phase]
    driver = run_dir.parent / "driver.py"
    driver.write_text(DRIVER)
    env = dict(os.environ, PYTHONPATH=str(ROOT), LONGBERT_PROGRESS="0", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TORCH_THREADS=str(torch.get_num_threads()))
    done = subprocess.run([sys.executable, str(driver), function, match, str(nth), *overrides, f"output_dir={run_dir}"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    for pattern in left:
        assert list(run_dir.glob(pattern)), f"the kill left {pattern}"
    assert (run_dir / "checkpoint" / "state.json").is_file() == has_checkpoint
    assert not (run_dir / "metrics.json").exists()




# CI runs the kills at the swap (what longbert.utils.outputs does); those while a staging folder is written (the first,
# whose rerun test_a_run_killed_before_its_first_checkpoint... covers too, and the second) run with -m slow.
SWAP_PHASES = ("between the swap's two renames", "after the swap, before the old one is removed")


@pytest.mark.parametrize("phase", [phase if phase in SWAP_PHASES else pytest.param(phase, marks=pytest.mark.slow)
                                   for phase in PHASES])
def test_a_run_killed_while_checkpointing_resumes_and_ends_as_an_uninterrupted_one(phase, overrides, uninterrupted,
                                                                                   tmp_path, capsys):
    run_dir = tmp_path / "run"
    kill_during_checkpoint(phase, overrides, run_dir)
    recipe = longbert.load_recipe(None, overrides + [f"output_dir={run_dir}"])
    if PHASES[phase][-1]:
        with pytest.raises(LongbertError, match="already holds a run; pass --resume"):
            longbert.train(recipe)  # (the folder was put right first: a cut swap's checkpoint is back)
    longbert.train(recipe, resume=True)
    if phase == "writing the first checkpoint":
        assert "has no checkpoint to continue from (its run stopped before the first one); training from the " \
               "beginning" in capsys.readouterr().err
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".")], "no staging or old folders are left"
    assert_same_run(uninterrupted, run_dir, WEIGHTS, steps=4)


def test_a_run_killed_before_its_first_checkpoint_starts_again_on_a_plain_rerun(overrides, uninterrupted, tmp_path,
                                                                               capsys):
    run_dir = tmp_path / "run"
    kill_during_checkpoint("writing the first checkpoint", overrides, run_dir)
    longbert.train(longbert.load_recipe(None, overrides + [f"output_dir={run_dir}"]))
    assert "stopped before its first checkpoint; training it again" in capsys.readouterr().err
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".")], "no staging or old folders are left"
    assert_same_run(uninterrupted, run_dir, WEIGHTS, steps=4)
