"""One strategy's run of a comparison, at its turn: trained, reused when finished with the same recipe, or continued
from its checkpoint, as its folder decides then (`plan.plan_runs`), and said in compare's words (a run folder another
process holds, a compare stopped while training). `Comparison` (orchestrator.py) decides what to run and in which
order."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypedDict

from longbert.comparison.formatting import say
from longbert.comparison.plan import plan_runs
from longbert.data.carving import check_run_data_unchanged
from longbert.errors import LongbertError
from longbert.training.run_record import RunMetrics, read_run_metrics
from longbert.training.stopping import TrainingInterrupted
from longbert.training.trainer import train
from longbert.utils.destinations import locked

# How a strategy's row came to be, as the report's settings table says: its run reused, resumed or trained.
RunStatus = Literal["reused", "resumed", "trained"]


class StrategyRun(TypedDict):
    status: RunStatus
    metrics: RunMetrics  # the run's metrics.json


def run_strategy(strategy: str, recipe, command: str, counter: str, data=None) -> StrategyRun:
    """Train, reuse or continue one strategy's run, as its folder decides now (`plan.plan_runs`: 'reuse', 'resume',
    'restart' or 'train'); `counter` ('[1/3]') prefixes what is said. Returns {'status': reused/resumed/trained,
    'metrics'}.

    Decided at the strategy's turn, not when compare started: another compare of the same name may have finished
    or checkpointed this run meanwhile, and a plan made before that would ask `train` to start over a finished run
    (which it refuses, in words meant for `longbert train`)."""
    run_dir = Path(recipe.output_dir)
    action = plan_runs({strategy: recipe})[strategy]
    if action in ("reuse", "resume"):  # the documents the run's split was made of, or none
        check_run_data_unchanged(run_dir, f"compare: {strategy}")
    if action == "reuse":
        say(f"{counter} {strategy}: finished run in {run_dir} has the same recipe; reused")
        return {"status": "reused", "metrics": read_run_metrics(run_dir)}
    refuse_if_in_use(strategy, run_dir)
    if action == "restart":
        say(f"{counter} {strategy}: {run_dir} stopped before its first checkpoint; training it again")
    verb = "continuing from the checkpoint in" if action == "resume" else "training into"
    say(f"{counter} {strategy}: {verb} {run_dir}")
    try:
        # resume=True for a folder that holds a run: train() first recovers what a killed write left (under the
        # run folder's lock), then continues from the checkpoint or, with none, starts that run again.
        result = train(recipe, resume=action != "train", command=command, data=data)
    except TrainingInterrupted as error:
        raise TrainingInterrupted(f"compare stopped while training {strategy} ({error}); run the same compare "
                                  "command again to continue where it stopped") from None
    return {"status": "resumed" if action == "resume" else "trained", "metrics": result.record}


def refuse_if_in_use(strategy: str, run_dir: Path) -> None:
    """A LongbertError in compare's own words when another process (a compare of the same name, or a `train` into
    that folder) holds the run folder's lock; `train` would say it in its own, naming options compare does not
    take. The lock is only tried here, and let go at once."""
    try:
        with locked(run_dir):
            pass
    except LongbertError:
        raise LongbertError(
            f"{strategy}: {run_dir} is in use by another longbert process (a compare with the same --name "
            f"{run_dir.parent.name}, or a train into that folder); wait for it to end and run this compare again "
            "(finished runs are reused, interrupted ones continue), or choose another --name") from None
