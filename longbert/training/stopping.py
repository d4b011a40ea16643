"""Stopping a training cleanly: a stop request (an Event, set by Ctrl-C or SIGTERM) that a loop checks once after
every optimiser step, and the error it raises once its checkpoint is on disk. Both loops use them. And the stop of a
training whose loss is no longer a number (`finite_loss`), which every loop checks at every batch."""

from __future__ import annotations

import math
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Protocol

from longbert.errors import LongbertError
from longbert.utils.atomic import Terminated


class TrainingInterrupted(LongbertError):
    """Raised after a clean stop (Ctrl-C, SIGTERM, or a stop request) once the checkpoint is on disk. `signum`: the
    signal that asked for the stop (None: a stop request in code), so that the command exits with its status."""

    signum: int | None = None


# The signal that set the stop of the training now running (`stop_on_signals`), read by `interrupted`: the stop
# request itself may be any object with set/is_set, with no room for it.
_asked_by: dict[str, int] = {}


class StopRequest(Protocol):
    """What `train(stop=...)` and `pretrain(stop=...)` accept: a threading.Event, or anything with its two methods."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


@contextmanager
def stop_on_signals(stop: StopRequest) -> Iterator[None]:
    """While the block runs, the first Ctrl-C / SIGTERM sets `stop` (the loop stops after the current optimiser step
    and writes a checkpoint); a second Ctrl-C interrupts at once (KeyboardInterrupt), and from then on Ctrl-C is
    ignored until the block has unwound, so that impatient presses do not interrupt the cleanup. The caller's
    handlers are put back when the block ends."""

    def request(signum, frame):
        if stop.is_set():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            raise Terminated(signum) if signum == signal.SIGTERM else KeyboardInterrupt
        _asked_by["signal"] = signum
        stop.set()

    _asked_by.clear()
    previous = {}
    try:
        previous = {s: signal.signal(s, request) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: no signal handling
        pass
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def interrupted(what: str, step: int, checkpoint_dir: Path) -> TrainingInterrupted:
    """The error a loop raises once it stopped on request and wrote its checkpoint into `checkpoint_dir`."""
    error = TrainingInterrupted(f"{what} stopped at step {step}; the checkpoint is in {checkpoint_dir}; "
                                "continue with --resume")
    error.signum = _asked_by.get("signal")
    return error


def stopped_before_checkpoint(what: str) -> TrainingInterrupted:
    """The error a phase before the first checkpoint (caching embeddings) raises once it stopped on request: nothing
    of it was kept, and the same command starts the run's training again (a folder without a checkpoint is trained
    again from the start)."""
    error = TrainingInterrupted(f"training stopped on request while {what}, before its first checkpoint: nothing of "
                                "it was kept; run the same command again to train from the start")
    error.signum = _asked_by.get("signal")
    return error


def finite_loss(loss: float, what: str, step: int) -> float:
    """`loss`, or one LongbertError line naming the step where it stopped being a number: a loss of nan or inf has
    already made the weights nan, and every later step, checkpoint and prediction would be NaN (exit 0, a model of
    nothing). `step` counts from 1."""
    if not math.isfinite(loss):
        raise LongbertError(f"{what} stopped at step {step}: the training loss is {loss}, not a finite number, so the "
                            "weights are no longer numbers either; nothing of this step was saved. Lower the learning "
                            "rate, or set train.max_grad_norm")
    return loss
