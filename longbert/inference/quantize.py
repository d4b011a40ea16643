"""`longbert quantize RUN`: measure once what int8 inference costs a trained model, and keep the answer with it.

int8 (`--precision int8` of predict, evaluate and serve) runs a copy of the model whose backbone Linear layers are
dynamically quantized (`longbert.modeling.int8.Int8Model`, which `LongDocumentClassifier.for_precision` hands out);
nothing quantized is stored, since the copy is made in a second when the model loads. What is stored is the
measurement: the kept model runs over the run's own validation split in fp32 and in int8, and how often the two
predict the same labels, both accuracies and the speed of each pass go into the model folder's training.json and its
model card.

It also chooses the model's recheck gap (`longbert.modeling.int8.Int8Model.recheck_close_calls`): the smallest of
RECHECK_GAPS at which re-reading int8's close calls in fp32 makes the labels agree with fp32's on at least
`agreement` of the validation documents. That is computed from the two passes (a document re-read in fp32 gets
fp32's label), then int8 runs once more with the chosen gap for its speed.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from longbert.config import load_recipe
from longbert.data.documents import load_corpus
from longbert.errors import LongbertError
from longbert.evaluation.metrics import multi_label_predictions
from longbert.evaluation.split_pass import predict_dataset
from longbert.modeling.card import TrainingFacts, refresh_card
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.int8 import RECHECK_GAPS, close_calls
from longbert.utils.destinations import locked
from longbert.utils.folders import BEST, RECIPE_FILE
from longbert.utils.hardware import describe_machine


def quantize(run_dir: str | Path, batch_size: int | None = None, agreement: float = 0.99, data=None) -> dict:
    """Measure int8 against fp32 on the validation split of the run in `run_dir` and record it in its kept model's
    folder (best/training.json, best/README.md). Returns the measurement: documents; agreement_plain, accuracy_plain
    and seconds_plain (int8 alone); recheck_gap (the gap chosen for `agreement`), rechecked (the share of documents
    it re-reads), agreement, accuracy_int8 and seconds_int8 (int8 with it: what `--precision int8` runs);
    accuracy_fp32, seconds_fp32; machine.
    `data`: the object in memory the run was trained on (`train(recipe, data=...)`), needed again for such a run."""
    run_dir = Path(run_dir)
    recipe_file, folder = run_dir / RECIPE_FILE, run_dir / BEST
    if not recipe_file.is_file() or not folder.is_dir():
        raise LongbertError(f"{run_dir} is not a finished longbert run folder (it needs recipe.yaml and {BEST}/)")
    with locked(run_dir):
        recipe = load_recipe(recipe_file)
        model = LongDocumentClassifier.from_pretrained(folder)
        corpus = load_corpus(recipe.data, model.tokenizer, recipe.seed, model.multi_label, source=data,
                             roles=["validation"])
        batch = batch_size or recipe.eval.batch_size
        measured = _measure(model, corpus.splits["validation"], batch, agreement)
        _record(folder, model, recipe, measured)
    return measured


def _measure(model, dataset, batch: int, agreement: float) -> dict:
    """Run `dataset` in fp32, in int8 alone, then in int8 with the recheck gap chosen for `agreement`, and compare
    their labels: the measurement `quantize` returns."""
    raw, seconds = {}, {}
    raw["fp32"], seconds["fp32"] = _timed_pass(model, dataset, batch, "fp32", "fp32")
    raw["plain"], seconds["plain"] = _timed_pass(model, dataset, batch, "plain", "int8", recheck_gap=0.0)
    labels = raw["fp32"]["labels"]
    fp32 = _decide(model, raw["fp32"]["probabilities"], len(labels))
    plain = _decide(model, raw["plain"]["probabilities"], len(labels))
    int8_probabilities = torch.as_tensor(raw["plain"]["probabilities"])
    gap = _choose_gap(model, fp32, plain, int8_probabilities, agreement)
    raw["int8"], seconds["int8"] = _timed_pass(model, dataset, batch, "int8", "int8", recheck_gap=gap)
    int8 = _decide(model, raw["int8"]["probabilities"], len(labels))
    truth = labels.reshape(len(labels), -1)
    return {
        "split": "validation",
        "documents": int(len(labels)),
        "agreement_plain": float(np.mean((fp32 == plain).all(1))),
        "accuracy_plain": float(np.mean((plain == truth).all(1))),
        "seconds_plain": round(seconds["plain"], 3),
        "agreement_target": agreement,
        "recheck_gap": gap,
        "rechecked": float(np.mean(_rechecked(model, int8_probabilities, gap))),
        "agreement": float(np.mean((fp32 == int8).all(1))),
        "accuracy_fp32": float(np.mean((fp32 == truth).all(1))),
        "accuracy_int8": float(np.mean((int8 == truth).all(1))),
        "seconds_fp32": round(seconds["fp32"], 3),
        "seconds_int8": round(seconds["int8"], 3),
        "batch_size": batch,
        "machine": describe_machine(),
    }


def _timed_pass(model, dataset, batch: int, name: str, precision: str, recheck_gap: float | None = None):
    """(the model's predictions over `dataset` at `precision`, the seconds they took)."""
    model.for_precision(precision, recheck_gap)  # the int8 wrapper (its quantized copy) is made before the clock starts
    started = time.perf_counter()
    predictions = predict_dataset(model, dataset, batch, description=f"validation, {name}", precision=precision)
    return predictions, time.perf_counter() - started


def _decide(model, probabilities: np.ndarray, documents: int) -> np.ndarray:
    """Each document's predicted labels as one row (a class index, or a multi-hot row at the thresholds)."""
    return (multi_label_predictions(probabilities, model.thresholds) if model.multi_label
            else probabilities.argmax(1)).reshape(documents, -1)


def _rechecked(model, int8_probabilities: torch.Tensor, gap: float) -> np.ndarray:
    """Which documents int8 at `gap` re-reads in fp32."""
    return close_calls(int8_probabilities, model.multi_label, model.thresholds, gap).numpy()


def _choose_gap(model, fp32: np.ndarray, plain: np.ndarray, int8_probabilities: torch.Tensor,
                agreement: float) -> float:
    """The smallest of RECHECK_GAPS at which int8's labels, its close calls re-read in fp32 (which gives fp32's
    labels), agree with fp32's on at least `agreement` of the documents; the largest when none does."""
    def agreeing(gap: float) -> float:
        rechecked = _rechecked(model, int8_probabilities, gap)
        return float(np.mean((np.where(rechecked[:, None], fp32, plain) == fp32).all(1)))

    return next(g for g in RECHECK_GAPS if agreeing(g) >= agreement or g == RECHECK_GAPS[-1])


def _record(folder: Path, model, recipe, measured: dict) -> None:
    """Keep the measurement in the model's training facts, and write them into its folder's training.json and card."""
    facts = model.training_facts or TrainingFacts(recipe=recipe.name)
    facts.int8 = measured
    model.training_facts = facts
    refresh_card(folder, model)
