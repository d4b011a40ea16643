"""`longbert quantize RUN`: measure once what int8 inference costs a trained model, and keep the answer with it.

int8 (`--precision int8` of predict, evaluate and serve) runs a copy of the model whose backbone Linear layers are
dynamically quantized (`LongDocumentClassifier.for_precision`); nothing quantized is stored, since the copy is made in
a second when the model loads. What is stored is the measurement: the kept model runs over the run's own validation
split in fp32 and in int8, and how often the two predict the same labels, both accuracies and the speed of each pass
go into the model folder's training.json and its model card.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from longbert.errors import LongbertError


def quantize(run_dir: str | Path, batch_size: int | None = None) -> dict:
    """Measure int8 against fp32 on the validation split of the run in `run_dir` and record it in its kept model's
    folder (best/training.json, best/README.md). Returns the measurement: documents, agreement (share of documents
    whose predicted labels are the same), accuracy_fp32, accuracy_int8, seconds_fp32, seconds_int8, machine."""
    from longbert.config import load_recipe
    from longbert.data.documents import load_corpus
    from longbert.evaluation.inference import predict_dataset
    from longbert.evaluation.metrics import multi_label_predictions
    from longbert.modeling.card import TrainingFacts, refresh_card
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.training.runs import BEST, locked
    from longbert.utils.hardware import describe_machine

    run_dir = Path(run_dir)
    recipe_file, folder = run_dir / "recipe.yaml", run_dir / BEST
    if not recipe_file.is_file() or not folder.is_dir():
        raise LongbertError(f"{run_dir} is not a finished longbert run folder (it needs recipe.yaml and {BEST}/)")
    with locked(run_dir):
        recipe = load_recipe(recipe_file)
        model = LongDocumentClassifier.from_pretrained(folder)
        corpus = load_corpus(recipe.data, model.tokenizer, recipe.seed, model.multi_label, roles=["validation"])
        dataset = corpus.splits["validation"]
        batch = batch_size or recipe.eval.batch_size
        raw, seconds = {}, {}
        for precision in ("fp32", "int8"):
            started = time.perf_counter()
            raw[precision] = predict_dataset(model, dataset, batch, description=f"validation, {precision}",
                                             precision=precision)
            seconds[precision] = time.perf_counter() - started
        labels = raw["fp32"]["labels"]
        # Each document's predicted labels as one row (a class index, or a multi-hot row at the model's thresholds).
        decided = {p: (multi_label_predictions(r["probabilities"], model.thresholds) if model.multi_label
                       else r["probabilities"].argmax(1)).reshape(len(labels), -1) for p, r in raw.items()}
        truth = labels.reshape(len(labels), -1)
        measured = {
            "split": "validation",
            "documents": int(len(labels)),
            "agreement": float(np.mean((decided["fp32"] == decided["int8"]).all(1))),
            "accuracy_fp32": float(np.mean((decided["fp32"] == truth).all(1))),
            "accuracy_int8": float(np.mean((decided["int8"] == truth).all(1))),
            "seconds_fp32": round(seconds["fp32"], 3),
            "seconds_int8": round(seconds["int8"], 3),
            "batch_size": batch,
            "machine": describe_machine(),
        }
        facts = model.training_facts or TrainingFacts(recipe=recipe.name)
        facts.int8 = measured
        model.training_facts = facts
        refresh_card(folder, model)
    return measured
