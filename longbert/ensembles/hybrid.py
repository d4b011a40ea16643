"""`longbert hybrid RUN`: make a hybrid model from a trained run, or from an ensemble folder (`longbert ensemble`,
compare's ensemble), whose members' mean probabilities are then the neural half. Its TF-IDF half
(`longbert.modeling.lexical`) is fitted on the run's own training documents, and its C and mixing weight are chosen
on the run's validation split, never on test; the hybrid is written as a model folder of its own (default
RUN/hybrid/), which predict, evaluate, serve and the transformers pipeline load like any other.

No neural pass is repeated: the run's kept model already predicted its validation and test splits
(predictions-validation.jsonl, predictions-test.jsonl), and the hybrid's probabilities are those mixed with the
TF-IDF half's. The folder is laid out as a run folder is (the model in best/, beside it the hybrid's
predictions-validation.jsonl, predictions-test.jsonl, hybrid.json and the run's recipe.yaml), so that every command
that takes a run folder takes it, and compare pairs its rows with everything else.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from longbert.config import load_recipe
from longbert.data.carving import check_file_unchanged
from longbert.data.documents import load_corpus
from longbert.errors import LongbertError
from longbert.evaluation.evaluate import write_predictions
from longbert.evaluation.metrics import compute_metrics
from longbert.evaluation.predictions import read_prediction_rows
from longbert.evaluation.split_pass import predict_dataset
from longbert.modeling.calibration import calibrated_raw, fit_calibration
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.lexical import fit_lexical
from longbert.modeling.model_folder import save_model_folder
from longbert.result import Result
from longbert.utils.atomic import write_json
from longbert.utils.destinations import locked
from longbert.utils.folders import BEST, HYBRID, HYBRID_SUMMARY, RECIPE_FILE, RunFolder, predictions_file
from longbert.utils.outputs import atomic_folder, named_folder, replaceable_folder


def make_hybrid(run_dir: str | Path, output: str | Path | None = None, corpus=None, data=None) -> Result:
    """Fit the TF-IDF half for the run in `run_dir`, choose its weight on validation, and write the hybrid model
    folder to `output` (default <run_dir>/hybrid; an older hybrid there is replaced whole; the run folder, a folder
    holding it, or any other folder that is not empty is refused in one line before any work: `check_output`).
    `corpus`: the run's splits, tokenized (`data.load_corpus`), when the caller has them; else `data`: the object in
    memory the run was trained on (`train(recipe, data=...)`), needed again for such a run. Returns a `Result`: the
    folder (`output`, also the model to load) and, as its metrics, the summary hybrid.json holds: base run, mix, C,
    validation accuracies (neural, TF-IDF, hybrid) and, when the run was tested, the hybrid's test metrics."""
    run_dir = Path(run_dir)
    output = Path(output) if output is not None else run_dir / HYBRID
    recipe_file = _refuse_folders(run_dir, output)
    with locked(run_dir, reading=True):  # read, and its hybrid/ written through utils.outputs
        recipe, model = _load_run(run_dir, recipe_file)
        check_file_unchanged(run_dir, f"hybrid {run_dir}", recipe.data.path)  # the run's split, or none
        tested = RunFolder(run_dir).predictions("test").is_file()
        if corpus is None:
            roles = ["train", "validation"] + (["test"] if tested else [])
            corpus = load_corpus(recipe.data, model.tokenizer, recipe.seed, False, source=data, roles=roles)
        splits = corpus.splits
        if "validation" not in splits:
            raise LongbertError(f"{run_dir}'s recipe has no validation split to choose the hybrid's weight on")
        documents, neural, lexical = _fit_lexical_half(run_dir, model, splits, recipe.eval.batch_size)
        if model.ensemble is not None:  # mixed into the members' mean, not into the first member's own output
            model.ensemble.lexical = lexical
        else:
            model.lexical = lexical
        summary = {"base": str(run_dir), "mix": lexical.mix, **lexical.facts}
        roles = ["validation"] + (["test"] if tested and "test" in splits else [])
        raws = _mixed_predictions(run_dir, lexical, splits, documents, neural, roles)
        # The mixed probabilities calibrated as a whole on validation (never test); the neural half's own
        # calibration, which the folder's settings held, gives way to the hybrid's.
        calibration = fit_calibration(raws["validation"]["probabilities"], raws["validation"]["labels"], False,
                                      choice=recipe.model.calibration)
        model.settings.temperatures = calibration.model_temperatures
        raws = {role: calibrated_raw(calibration, raw) for role, raw in raws.items()}
        summary["calibration"] = calibration.to_dict()
        if "test" in raws:
            summary["test"] = compute_metrics(raws["test"]["labels"], raws["test"]["probabilities"],
                                              list(splits["test"]["n_tokens"]), model.label_names, False,
                                              uncalibrated=raws["test"].get("uncalibrated"))
        if model.training_facts is not None:  # the card's results are the hybrid's, not the run's neural model's
            model.training_facts.test = summary.get("test")
        _write_hybrid(output, model, splits, raws, summary, recipe_file)
    return Result(folder=output, metrics=summary, model=output)


def _refuse_folders(run_dir: Path, output: Path) -> Path:
    """Refuse, in one line before any work, a `run_dir` that is not a finished run folder and an `output` that cannot
    be the hybrid's folder (`check_output`). Returns the run's recipe.yaml."""

    recipe_file, folder = RunFolder(run_dir).recipe, RunFolder(run_dir).best
    if not recipe_file.is_file() or not folder.is_dir():
        raise LongbertError(f"{run_dir} is not a finished longbert run folder (it needs {RECIPE_FILE} and {BEST}/)")
    if output.exists() and not output.is_dir():
        raise LongbertError(f"--output {output} is a file; the hybrid is written as a folder")
    check_output(run_dir, output)
    return recipe_file


def _load_run(run_dir: Path, recipe_file: Path) -> tuple:
    """The run's recipe and kept model, refused when a hybrid cannot be made from it (multi-label, a hybrid
    already, an ensemble with a hybrid among its members)."""
    folder = RunFolder(run_dir).best
    recipe = load_recipe(recipe_file)
    model = LongDocumentClassifier.from_pretrained(folder)
    if model.multi_label:
        raise LongbertError(f"{run_dir} is multi-label; hybrid models are single-label only (the neural half's "
                            "per-label thresholds were tuned on its own probabilities)")
    if model.ensemble is None:
        if model.lexical is not None:
            raise LongbertError(f"{folder} is a hybrid already")
        return recipe, model
    if model.ensemble.lexical is not None:
        raise LongbertError(f"{folder} is a hybrid ensemble already")
    hybrids = [name for name, m in zip(model.ensemble.facts.members, model.ensemble.members(model))
               if m.lexical is not None]
    if hybrids:
        raise LongbertError(f"{folder} is an ensemble whose member {hybrids[0]} is a hybrid already: make the "
                            "ensemble of plain runs, then the hybrid of the ensemble")
    return recipe, model


def _fit_lexical_half(run_dir: Path, model, splits: dict, batch_size: int) -> tuple:
    """Fit the TF-IDF half, its C and mixing weight chosen on the validation split against the neural half's
    validation predictions (the run's, else made now). Returns each split's token ids, those neural predictions
    ({"validation": (D, C) probabilities}) and the fitted `LexicalModel`."""
    documents = {s: [_ids(d) for d in splits[s]["input_ids"]] for s in splits}
    neural = {"validation": _neural(RunFolder(run_dir).predictions("validation"), len(documents["validation"]))}
    if neural["validation"] is None:  # a run trained before validation predictions were kept
        raw = predict_dataset(model, splits["validation"], batch_size, description="validation")
        neural["validation"] = raw.get("uncalibrated", raw["probabilities"])
    n_classes = len(model.label_names)
    lexical = fit_lexical(documents["train"], splits["train"]["labels"], documents["validation"],
                          splits["validation"]["labels"], neural["validation"], n_classes,
                          model.backbone.config.vocab_size)
    return documents, neural, lexical


def _mixed_predictions(run_dir: Path, lexical, splits: dict, documents: dict, neural: dict, roles: list) -> dict:
    """The hybrid's predictions on each of `roles` (the neural half's read from the run's predictions-<split>.jsonl
    where `neural` lacks them), in write_predictions' form."""
    raws = {}
    for role in roles:
        probabilities = neural.get(role)
        if probabilities is None:
            probabilities = _neural(RunFolder(run_dir).predictions(role), len(documents[role]))
        raws[role] = {"probabilities": mix_probabilities(lexical, probabilities, documents[role]),
                      "labels": np.asarray(splits[role]["labels"]), "unit_weights": []}
    return raws


def _write_hybrid(output: Path, model, splits: dict, raws: dict, summary: dict, recipe_file: Path) -> None:
    """The hybrid's folder, laid out as a run folder, written whole or not at all (an older one replaced)."""
    with atomic_folder(output, HYBRID_SUMMARY, "--output") as staging:
        save_model_folder(model, staging / BEST)  # `longbert predict OUTPUT` finds it there, as in a run folder
        for role, raw in raws.items():
            write_predictions(staging / predictions_file(role), splits[role], raw, model.label_names, False)
        write_json(staging / HYBRID_SUMMARY, summary)
        # The recipe its neural half was trained with: `longbert evaluate OUTPUT` reads the same data from it.
        (staging / RECIPE_FILE).write_bytes(recipe_file.read_bytes())


def check_output(run_dir: Path, output: Path) -> None:
    """Refuse, before any work, an --output whose replacement would delete what `hybrid` did not write: the run
    folder itself or a folder holding it, and any folder that is neither empty nor an earlier hybrid (hybrid.json)."""
    named_folder(output, "--output")  # '', '.' and '..' name no folder of their own: that line first
    run, out = run_dir.resolve(), output.resolve()
    if out == run or out in run.parents:
        raise LongbertError(f"--output {output} is the run folder {run_dir} or holds it; the hybrid is written to a "
                            f"folder of its own (default {run_dir / HYBRID})")
    replaceable_folder(output, HYBRID_SUMMARY, "--output")


def mix_probabilities(lexical, neural: np.ndarray, documents: list) -> np.ndarray:
    """(D, C) neural probabilities and the D documents' token ids -> the hybrid's (D, C) probabilities, as its
    `forward` computes them (`LexicalModel.fuse`)."""
    logits = torch.from_numpy(np.log(np.clip(np.asarray(neural, dtype=np.float32), 1e-30, None)))
    return lexical.fuse(logits, documents).softmax(-1).numpy()


def _ids(row):
    return torch.as_tensor(row, dtype=torch.long)


def _neural(path: Path, documents: int) -> np.ndarray | None:
    """(D, C) probabilities before calibration from a run's predictions-<split>.jsonl (what a hybrid mixes), in split
    order; None when the file is absent."""
    if not path.is_file():
        return None
    rows = sorted(read_prediction_rows(path), key=lambda r: r.index)
    if len(rows) != documents:
        raise LongbertError(f"{path} has {len(rows)} rows but the split has {documents} documents: the run's data "
                            "has changed since it was trained")
    return np.array([r.combined_probabilities for r in rows], dtype=np.float64)
