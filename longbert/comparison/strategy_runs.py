"""One row of a comparison at a time: train a strategy's run (or reuse a finished one, or continue an interrupted
one), load the model and the test split it left for the measurements, and the TF-IDF baseline row, kept beside the
runs. `compare` (run.py) decides what to run and in which order."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Literal, TypedDict

from longbert.config import is_multi_label
from longbert.training.run_record import RunMetrics, read_run_metrics
from longbert.utils.folders import BASELINE_FILE
from longbert.utils.logs import get_logger

# How a strategy's row came to be, as the report's settings table says: its run reused, resumed or trained.
RunStatus = Literal["reused", "resumed", "trained"]


class StrategyRun(TypedDict):
    status: RunStatus
    metrics: RunMetrics  # the run's metrics.json


def say(message: str) -> None:
    """A progress line of compare's on stderr (stdout stays for the summary)."""
    get_logger(__name__).info(f"compare: {message}")


def run_strategy(strategy: str, recipe, command: str, counter: str, data=None) -> StrategyRun:
    """Train, reuse or continue one strategy's run, as its folder decides now (`plan.plan_runs`: 'reuse', 'resume',
    'restart' or 'train'); `counter` ('[1/3]') prefixes what is said. Returns {'status': reused/resumed/trained,
    'metrics'}.

    Decided at the strategy's turn, not when compare started: another compare of the same name may have finished
    or checkpointed this run meanwhile, and a plan made before that would ask `train` to start over a finished run
    (which it refuses, in words meant for `longbert train`)."""
    from longbert.comparison.plan import plan_runs
    from longbert.training.finetune import TrainingInterrupted, train

    run_dir = Path(recipe.output_dir)
    action = plan_runs({strategy: recipe})[strategy]
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
    from longbert.errors import LongbertError
    from longbert.utils.destinations import locked

    try:
        with locked(run_dir):
            pass
    except LongbertError:
        raise LongbertError(
            f"{strategy}: {run_dir} is in use by another longbert process (a compare with the same --name "
            f"{run_dir.parent.name}, or a train into that folder); wait for it to end and run this compare again "
            "(finished runs are reused, interrupted ones continue), or choose another --name") from None


def load_model(run_dir: Path):
    """The run's kept model, on the GPU when there is one, ready for inference."""
    import torch

    from longbert.modeling.classifier import LongDocumentClassifier

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return LongDocumentClassifier.from_pretrained(run_dir).to(device).eval()


def load_splits(recipe, data=None):
    """The splits exactly as training saw them (same data settings and seed), tokenized with the tokenizer the runs
    were trained with (the recipe's backbone's), from `data`, the object in memory, when the runs were trained on
    one."""
    from longbert.data.documents import load_corpus
    from longbert.modeling.backbone import load_tokenizer

    return load_corpus(recipe.data, load_tokenizer(recipe.backbone.name), recipe.seed,
                       is_multi_label(recipe.model.problem_type), source=data)


def baseline_row(recipe, folder: Path, splits) -> dict:
    """The TF-IDF baseline on the recipe's data (see `comparison.baseline`), kept in <folder>/tfidf-baseline.json and
    reused while the data settings, seed and baseline settings are the same. `splits()` gives the Corpus."""
    import numpy as np

    from longbert.comparison.baseline import SETTINGS, tfidf_baseline
    from longbert.utils.atomic import write_json

    key = {"data": dataclasses.asdict(recipe.data), "seed": recipe.seed, "backbone": recipe.backbone.name,
           "problem_type": recipe.model.problem_type, "settings": SETTINGS}
    path = folder / BASELINE_FILE
    try:
        saved = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        saved = None
    if saved is not None and saved.get("key") == json.loads(json.dumps(key)):
        result = saved["result"]
        return {**result, "probabilities": np.asarray(result["probabilities"]), "labels": np.asarray(result["labels"])}
    say("training the TF-IDF + logistic regression baseline")
    result = tfidf_baseline(splits())
    say(f"baseline: test {100 * result['metrics'].get('accuracy', result['metrics'].get('exact_match', 0)):.1f}% "
        f"(C={result['settings']['C']} chosen on validation) in {result['train_seconds']:.0f}s")
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, {"key": key, "result": {**result, "probabilities": result["probabilities"].tolist(),
                                             "labels": result["labels"].tolist()}})
    return result
