"""`longbert ensemble RUN RUN ... --output DIR`: two or more trained runs made into one model folder whose
probabilities are their average (longbert.modeling.ensemble), chosen on validation as compare chooses its ensemble
row: every group of two or more of the runs given is scored by the averaged probabilities of the runs' kept
predictions-validation.jsonl, by the first run's best_metric (loss falls back to macro_f1), and the best group is
kept (`--all`: every run given, nothing chosen). Never the test split.

No neural pass is repeated: each run's kept model already predicted its validation and test splits, and the
ensemble's rows are their averages, which is what the saved ensemble computes (a test checks it). DIR is laid out as a
run folder is (the model in best/, beside it predictions-validation.jsonl, predictions-test.jsonl when every member
was tested, ensemble-summary.json and the first member's recipe.yaml), so every command that takes a run folder
takes it: predict, evaluate, serve, explain, quantize, and compare's paired rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from pathlib import Path

from longbert.config import load_recipe
from longbert.ensembles.choice import (
    VALIDATION_FILE,
    average_calibration,
    averaged_rows,
    choose_members,
    read_kept,
    read_validation,
    score_rows,
    scored,
    selection_metric,
)
from longbert.errors import LongbertError
from longbert.evaluation.predictions import PredictionRow, write_prediction_rows
from longbert.modeling.calibration import Calibration
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.ensemble import EnsembleFacts, assemble_ensemble
from longbert.modeling.model_folder import save_model_folder
from longbert.result import Result
from longbert.utils.atomic import json_text
from longbert.utils.destinations import locked
from longbert.utils.folders import (
    BEST,
    CONFIG_FILE,
    ENSEMBLE_SUMMARY,
    HEAD_FILE,
    RECIPE_FILE,
    RunFolder,
    predictions_file,
)
from longbert.utils.outputs import atomic_folder, named_folder, replaceable_folder

MAX_MEMBERS = 8  # groups of 2 or more among 8 runs: 247 scored; more is not a choice validation can make


def make_ensemble(run_dirs: list[str | Path], output: str | Path, use_all: bool = False,
                  chosen_by: str | None = None) -> Result:
    """Choose the members among `run_dirs` on validation (or take them all with `use_all`, or when the caller chose
    them already, saying how in `chosen_by`), and write the ensemble folder to `output` (an older ensemble there is
    replaced whole; a run folder, a folder holding one, or any other folder that is not empty is refused in one line
    before any work). Returns a `Result`: the folder (`output`, also the model to load) and, as its metrics, the
    summary ensemble-summary.json holds: members, how they were chosen, each one's and the ensemble's validation
    score, and its test metrics when every member was tested."""
    runs = [Path(r) for r in run_dirs]
    output = Path(output)
    check_runs(runs, output, None if chosen_by else MAX_MEMBERS)  # the ceiling bounds a choice, not a chosen group
    names = member_names(runs)
    prints = refuse_copies(runs, names)
    with contextlib.ExitStack() as stack:
        for run in runs:
            stack.enter_context(locked(run, reading=True))  # only read: a read-only run is a member too
        recipe = load_recipe(RunFolder(runs[0]).recipe)
        metric = selection_metric(recipe.train.best_metric)
        validation, missing = _validation_rows(runs, names, use_all)
        chosen, chosen_by = _members(names, validation, metric, use_all, chosen_by)
        members = [LongDocumentClassifier.from_pretrained(RunFolder(runs[names.index(m)]).best) for m in chosen]
        # The mean of the members' probabilities, calibrated as a whole on validation (never test); the first
        # member's own calibration, which the folder's settings held, gives way to the ensemble's.
        calibration = None if missing else average_calibration(validation, chosen, recipe.model.calibration)
        members[0].settings.temperatures = None if calibration is None else calibration.model_temperatures
        label_names = members[0].label_names
        rows = {"validation": None if missing else averaged_rows(validation, chosen, label_names, calibration)}
        scores = None if missing else {**{m: score_rows(validation[m], metric) for m in chosen},
                                       "ensemble": score_rows(rows["validation"], metric)}
        facts = EnsembleFacts(members=list(chosen), chosen_by=chosen_by, metric=metric, validation=scores)
        model = assemble_ensemble(members, facts)
        test_rows = _test_rows(runs, names, chosen, model.label_names, calibration)
        if test_rows is not None:
            rows["test"] = test_rows
        summary = {"members": {m: str(runs[names.index(m)]) for m in chosen}, "chosen_by": chosen_by,
                   "fingerprints": {m: prints[names.index(m)] for m in chosen}, "metric": metric, "validation": scores,
                   "calibration": None if calibration is None else calibration.to_dict(), "test": None}
        if rows.get("test") is not None:
            summary["test"] = scored(rows["test"], model.label_names)
        if model.training_facts is not None:  # the card's results are the ensemble's, not its first member's
            model.training_facts = dataclasses.replace(model.training_facts, test=summary["test"],
                                                       validation=card_validation(rows["validation"],
                                                                                  model.label_names))
        write_folder(output, model, rows, summary, RunFolder(runs[names.index(chosen[0])]).recipe)
    return Result(folder=output, metrics=summary, model=output)


def card_validation(rows: list[PredictionRow] | None, label_names: list[str]) -> dict | None:
    """The card's validation line for an ensemble: the scores of its members' mean probabilities (None when a
    member kept no validation predictions), marked as such in place of a training step."""
    if rows is None:
        return None
    metrics = scored(rows, label_names)
    return {"of": "the members' mean probabilities",
            **{k: metrics[k] for k in ("accuracy", "macro_f1") if isinstance(metrics.get(k), float)}}


def _validation_rows(runs: list[Path], names: list[str], use_all: bool) -> tuple[dict, list[str]]:
    """(each run's kept validation rows by name, None where it kept none; the names of those that kept none).
    Refused when a run kept none and the members are to be chosen, or when the rows are not of the same documents."""
    validation = {name: read_validation(run) for name, run in zip(names, runs)}
    missing = [name for name, rows in validation.items() if rows is None]
    if missing and not use_all:
        raise LongbertError(f"{missing[0]} kept no validation predictions ({VALIDATION_FILE}) to choose "
                            "the members on: train it again, or take every run given with --all")
    if not missing:
        same_documents(validation, "validation")
    return validation, missing


def _members(names: list[str], validation: dict, metric: str, use_all: bool,
             chosen_by: str | None) -> tuple[tuple[str, ...], str]:
    """(the members' names, how they were chosen): every run given when all are taken, when the caller chose them,
    or when there are two; else the group of two or more that scores best on validation."""
    if use_all or chosen_by or len(names) == 2:
        chosen, groups = tuple(names), 1
    else:
        chosen, _, groups = choose_members(validation, metric)
    return chosen, chosen_by or ("all the runs given (--all)" if use_all else
                                 "the 2 runs given (the only group of two or more)" if len(names) == 2 else
                                 f"validation {metric} among {groups} groups of 2 or more of {len(names)} runs")


def _test_rows(runs: list[Path], names: list[str], chosen: tuple, label_names: list[str],
               calibration: Calibration | None) -> list[PredictionRow] | None:
    """The ensemble's test rows (calibrated as its validation), when every member kept its test predictions (of the
    same documents); else None."""
    test = {m: read_kept(runs[names.index(m)], predictions_file("test")) for m in chosen}
    if all(r is not None for r in test.values()):
        same_documents(test, "test")
        return averaged_rows(test, chosen, label_names, calibration)
    return None


def write_folder(output: Path, model, rows: dict[str, list[PredictionRow] | None], summary: dict,
                 recipe_file: Path) -> None:
    """Write the ensemble folder atomically, laid out as a run folder: the model in best/, its prediction rows,
    the summary, and the first member's recipe (`longbert evaluate OUTPUT` reads the same data from it)."""
    with atomic_folder(output, ENSEMBLE_SUMMARY, "--output") as staging:
        save_model_folder(model, staging / BEST)  # `longbert predict OUTPUT` finds it there, as in a run folder
        for role, role_rows in rows.items():
            if role_rows is not None:
                write_prediction_rows(staging / predictions_file(role), role_rows)
        (staging / ENSEMBLE_SUMMARY).write_text(json_text(summary, ENSEMBLE_SUMMARY, indent=2))
        (staging / RECIPE_FILE).write_bytes(recipe_file.read_bytes())


def check_runs(runs: list[Path], output: Path, most: int | None = MAX_MEMBERS) -> None:
    """Refuse, before any work: fewer than two runs or more than `most` (None: no ceiling, for members chosen
    already, as compare's rows over many seeds), a run named twice, a folder that is not a finished run, and an
    --output that is one of the runs or holds one, or is neither empty nor an earlier ensemble (its replacement
    would delete what `ensemble` did not write)."""
    if len(runs) < 2 or (most is not None and len(runs) > most):
        raise LongbertError(f"an ensemble takes 2 to {most} runs, got {len(runs)}" if most is not None else
                            f"an ensemble takes 2 runs or more, got {len(runs)}")
    resolved = [r.resolve() for r in runs]
    twice = next((r for i, r in enumerate(runs) if resolved[i] in resolved[:i]), None)
    if twice is not None:
        raise LongbertError(f"{twice} is named twice: an ensemble's members are different runs")
    for run in runs:
        if not RunFolder(run).is_run() or not RunFolder(run).best.is_dir():
            raise LongbertError(f"{run} is not a finished longbert run folder (it needs {RECIPE_FILE} and {BEST}/)")
    named_folder(output, "--output")
    if output.exists() and not output.is_dir():
        raise LongbertError(f"--output {output} is a file; the ensemble is written as a folder")
    out = output.resolve()
    for run, path in zip(runs, resolved):
        if out == path or out in path.parents or path in out.parents:
            raise LongbertError(f"--output {output} is the run folder {run}, holds it or lies inside it; the ensemble "
                                "is written to a folder of its own")
    replaceable_folder(output, ENSEMBLE_SUMMARY, "--output")


def member_names(runs: list[Path]) -> list[str]:
    """Each run's name in the ensemble, for people: the shortest ending of its resolved path that no other run's
    path shares (its folder's name; 'chunk/seed43' where two runs share a folder name; more where those are shared
    too). Names never identify a member: the code keys members by their place in `runs`."""
    parts = [r.resolve().parts for r in runs]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(r.resolve()) for r in runs]  # unreachable: check_runs refused a run named twice


# What calibration sets in a model's settings: two folders that differ only there hold one network.
CALIBRATION_KEYS = ("temperatures", "thresholds")


def fingerprint(run: Path) -> str:
    """What a run's kept network holds, as a hash of its settings less its calibration (CALIBRATION_KEYS) and of its
    weights outside the backbone (the head and the strategy's; the backbone's fine-tuned weights change them too):
    two folders with the same fingerprint are copies of one network, whatever temperature each was given."""
    best = RunFolder(run).best
    settings = {k: v for k, v in json.loads((best / CONFIG_FILE).read_text()).items() if k not in CALIBRATION_KEYS}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    digest.update((best / HEAD_FILE).read_bytes())
    return digest.hexdigest()[:16]


def refuse_copies(runs: list[Path], names: list[str]) -> list[str]:
    """Each run's fingerprint; a run whose model is a copy of another's (a hard link or copy of one run folder in
    two places) is refused in one line: an ensemble of a model with itself is that model."""
    prints = [fingerprint(run) for run in runs]
    for i, value in enumerate(prints):
        if value in prints[:i]:
            first = prints.index(value)
            raise LongbertError(f"{runs[i]} holds the same model as {runs[first]} ({names[first]}): an ensemble's "
                                "members are different models")
    return prints


def same_documents(rows: dict[str, list[PredictionRow]], split: str) -> None:
    """Refuse members whose kept predictions of `split` are not of the same documents, in the same order: each row's
    document id (the data's id column, else its row), label and length in tokens must agree (the members share a
    tokenizer), so that runs on other files whose rows happen to share positions and labels are not averaged."""
    def document(row: PredictionRow) -> tuple:
        return row.index, row.label, row.n_tokens, row.id

    names = list(rows)
    first = [document(r) for r in rows[names[0]]]
    for name in names[1:]:
        if [document(r) for r in rows[name]] != first:
            raise LongbertError(f"{name}'s {split} predictions are not of the documents {names[0]}'s are: members "
                                "of an ensemble are runs on the same data")
