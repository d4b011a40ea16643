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
import functools
import json
from pathlib import Path

import numpy as np

from longbert.errors import LongbertError
from longbert.evaluation.predictions import PredictionRow, write_prediction_rows
from longbert.utils.folders import BEST, ENSEMBLE_SUMMARY, HYBRID

MAX_MEMBERS = 8  # groups of 2 or more among 8 runs: 247 scored; more is not a choice validation can make


def make_ensemble(run_dirs: list[str | Path], output: str | Path, use_all: bool = False,
                  chosen_by: str | None = None) -> dict:
    """Choose the members among `run_dirs` on validation (or take them all with `use_all`, or when the caller chose
    them already, saying how in `chosen_by`), and write the ensemble folder to `output` (an older ensemble there is
    replaced whole; a run folder, a folder holding one, or any other folder that is not empty is refused in one line
    before any work). Returns the summary ensemble-summary.json holds: members, how they were chosen, each one's and
    the ensemble's validation score, and its test metrics when every member was tested."""
    from longbert.comparison.ensemble import score_rows, scored, selection_metric
    from longbert.config import load_recipe
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.modeling.ensemble import EnsembleFacts, assemble_ensemble
    from longbert.utils.destinations import locked

    runs = [Path(r) for r in run_dirs]
    output = Path(output)
    check_runs(runs, output, None if chosen_by else MAX_MEMBERS)  # the ceiling bounds a choice, not a chosen group
    names = member_names(runs)
    with contextlib.ExitStack() as stack:
        for run in runs:
            stack.enter_context(locked(run))
        recipe = load_recipe(runs[0] / "recipe.yaml")
        metric = selection_metric(recipe.train.best_metric)
        validation, missing = _validation_rows(runs, names, use_all)
        chosen, chosen_by = _members(names, validation, metric, use_all, chosen_by)
        members = [LongDocumentClassifier.from_pretrained(runs[names.index(m)] / BEST) for m in chosen]
        rows = {"validation": None if missing else averaged_rows(validation, chosen, members[0].label_names)}
        scores = None if missing else {**{m: score_rows(validation[m], metric) for m in chosen},
                                       "ensemble": score_rows(rows["validation"], metric)}
        facts = EnsembleFacts(members=list(chosen), chosen_by=chosen_by, metric=metric, validation=scores)
        model = assemble_ensemble(members, facts)
        test_rows = _test_rows(runs, names, chosen, model.label_names)
        if test_rows is not None:
            rows["test"] = test_rows
        summary = {"members": {m: str(runs[names.index(m)]) for m in chosen}, "chosen_by": chosen_by,
                   "metric": metric, "validation": scores, "test": None}
        if rows.get("test") is not None:
            summary["test"] = scored(rows["test"], model.label_names)
        if model.training_facts is not None:  # the card's results are the ensemble's, not its first member's
            model.training_facts = dataclasses.replace(model.training_facts, test=summary["test"],
                                                       validation=card_validation(rows["validation"],
                                                                                  model.label_names))
        write_folder(output, model, rows, summary, runs[names.index(chosen[0])] / "recipe.yaml")
    return summary


def card_validation(rows: list[PredictionRow] | None, label_names: list[str]) -> dict | None:
    """The card's validation line for an ensemble: the scores of its members' mean probabilities (None when a
    member kept no validation predictions), marked as such in place of a training step."""
    from longbert.comparison.ensemble import scored

    if rows is None:
        return None
    metrics = scored(rows, label_names)
    return {"of": "the members' mean probabilities",
            **{k: metrics[k] for k in ("accuracy", "macro_f1") if isinstance(metrics.get(k), float)}}


def _validation_rows(runs: list[Path], names: list[str], use_all: bool) -> tuple[dict, list[str]]:
    """(each run's kept validation rows by name, None where it kept none; the names of those that kept none).
    Refused when a run kept none and the members are to be chosen, or when the rows are not of the same documents."""
    from longbert.comparison.ensemble import read_validation

    validation = {name: read_validation(run) for name, run in zip(names, runs)}
    missing = [name for name, rows in validation.items() if rows is None]
    if missing and not use_all:
        raise LongbertError(f"{missing[0]} kept no validation predictions (predictions-validation.jsonl) to choose "
                            "the members on: train it again, or take every run given with --all")
    if not missing:
        same_documents(validation, "validation")
    return validation, missing


def _members(names: list[str], validation: dict, metric: str, use_all: bool,
             chosen_by: str | None) -> tuple[tuple[str, ...], str]:
    """(the members' names, how they were chosen): every run given when all are taken, when the caller chose them,
    or when there are two; else the group of two or more that scores best on validation."""
    from longbert.comparison.ensemble import choose_members

    if use_all or chosen_by or len(names) == 2:
        chosen, groups = tuple(names), 1
    else:
        chosen, _, groups = choose_members(validation, metric)
    return chosen, chosen_by or ("all the runs given (--all)" if use_all else
                                 "the 2 runs given (the only group of two or more)" if len(names) == 2 else
                                 f"validation {metric} among {groups} groups of 2 or more of {len(names)} runs")


def _test_rows(runs: list[Path], names: list[str], chosen: tuple, label_names: list[str]) -> list[PredictionRow] | None:
    """The ensemble's test rows, when every member kept its test predictions (of the same documents); else None."""
    from longbert.comparison.ensemble import read_kept
    from longbert.comparison.results import PREDICTIONS_FILE

    test = {m: read_kept(runs[names.index(m)], PREDICTIONS_FILE) for m in chosen}
    if all(r is not None for r in test.values()):
        same_documents(test, "test")
        return averaged_rows(test, chosen, label_names)
    return None


def write_folder(output: Path, model, rows: dict[str, list[PredictionRow] | None], summary: dict,
                 recipe_file: Path) -> None:
    """Write the ensemble folder atomically, laid out as a run folder: the model in best/, its prediction rows,
    the summary, and the first member's recipe (`longbert evaluate OUTPUT` reads the same data from it)."""
    from longbert.modeling.folder import save_model_folder
    from longbert.utils.atomic import atomic_folder

    with atomic_folder(output, ENSEMBLE_SUMMARY, "--output") as staging:
        save_model_folder(model, staging / BEST)  # `longbert predict OUTPUT` finds it there, as in a run folder
        for role, role_rows in rows.items():
            if role_rows is not None:
                write_prediction_rows(staging / f"predictions-{role}.jsonl", role_rows)
        (staging / ENSEMBLE_SUMMARY).write_text(json.dumps(summary, indent=2))
        (staging / "recipe.yaml").write_bytes(recipe_file.read_bytes())


def check_runs(runs: list[Path], output: Path, most: int | None = MAX_MEMBERS) -> None:
    """Refuse, before any work: fewer than two runs or more than `most` (None: no ceiling, for members chosen
    already, as compare's rows over many seeds), a run named twice, a folder that is not a finished run, and an
    --output that is one of the runs or holds one, or is neither empty nor an earlier ensemble (its replacement
    would delete what `ensemble` did not write)."""
    from longbert.utils.atomic import named_folder, replaceable_folder

    if len(runs) < 2 or (most is not None and len(runs) > most):
        raise LongbertError(f"an ensemble takes 2 to {most} runs, got {len(runs)}" if most is not None else
                            f"an ensemble takes 2 runs or more, got {len(runs)}")
    resolved = [r.resolve() for r in runs]
    twice = next((r for i, r in enumerate(runs) if resolved[i] in resolved[:i]), None)
    if twice is not None:
        raise LongbertError(f"{twice} is named twice: an ensemble's members are different runs")
    for run in runs:
        if not (run / "recipe.yaml").is_file() or not (run / BEST).is_dir():
            raise LongbertError(f"{run} is not a finished longbert run folder (it needs recipe.yaml and {BEST}/)")
    named_folder(output, "--output")
    if output.exists() and not output.is_dir():
        raise LongbertError(f"--output {output} is a file; the ensemble is written as a folder")
    out = output.resolve()
    for run, path in zip(runs, resolved):
        if out == path or out in path.parents:
            raise LongbertError(f"--output {output} is the run folder {run} or holds it; the ensemble is written to a "
                                "folder of its own")
    replaceable_folder(output, ENSEMBLE_SUMMARY, "--output")


def member_names(runs: list[Path]) -> list[str]:
    """Each run's name in the ensemble: its folder's name, or (where two runs share it, as seeds of one strategy
    do) its last two path parts."""
    names = [r.resolve().name for r in runs]
    if len(set(names)) == len(names):
        return names
    return ["/".join(r.resolve().parts[-2:]) for r in runs]


def same_documents(rows: dict[str, list[PredictionRow]], split: str) -> None:
    """Refuse members whose kept predictions of `split` are not of the same documents, in the same order."""
    names = list(rows)
    first = [(r.index, r.label) for r in rows[names[0]]]
    for name in names[1:]:
        if [(r.index, r.label) for r in rows[name]] != first:
            raise LongbertError(f"{name}'s {split} predictions are not of the documents {names[0]}'s are: members "
                                "of an ensemble are runs on the same data")


def averaged_rows(rows: dict[str, list[PredictionRow]], members: tuple[str, ...],
                  label_names: list[str]) -> list[PredictionRow]:
    """The ensemble's prediction rows, in a run's predictions-<split>.jsonl form, from its members' rows."""
    from longbert.comparison.ensemble import averaged

    probabilities = averaged(rows, members)  # (D, C)
    out = []
    for row, p in zip(rows[members[0]], probabilities):
        predicted = int(np.argmax(p))
        out.append(dataclasses.replace(row, probabilities=[float(q) for q in p], predicted=predicted,
                                       predicted_label=label_names[predicted], unit_weights=None))
    return out


def deployable(runs: dict[str, dict[str, Path]], combined: list[dict], folder: Path, metric: str) -> dict | None:
    """compare's model to deploy: of every row a folder can hold (each strategy's run; the ensemble, written here as
    an ensemble folder under `folder`; the hybrid's folder; each strategy's seeds averaged, written as an ensemble
    folder), the one whose validation predictions score best by `metric` (accuracy or macro_f1); ties go to the
    earlier row, strategies first. Chosen on validation, never on test. `runs`: each strategy's run folders by run
    name ('chunk', 'chunk-seed43'), its base seed's first. Returns {row, folder, metric, validation: {row: score}},
    or None when some run kept no validation predictions."""
    from longbert.comparison.ensemble import ENSEMBLE, averaged, read_validation, score, score_rows

    by_name = {name: d for dirs in runs.values() for name, d in dirs.items()}
    base = {strategy: next(iter(dirs.values())) for strategy, dirs in runs.items()}
    read = functools.cache(read_validation)  # a run's rows are read once, however many rows it is a member of
    if any(read(d) is None for d in base.values()):
        return None
    members, scores, folders = {}, {}, {}
    for strategy, d in base.items():
        scores[strategy], folders[strategy] = score_rows(read(d), metric), d
    for row in combined:
        if row["name"] == ENSEMBLE:
            members[ENSEMBLE] = [by_name[m] for m in row["members"]]
            rows = {m: read(by_name[m]) for m in row["members"]}
            scores[ENSEMBLE] = score(rows[row["members"][0]], averaged(rows, tuple(row["members"])), metric)
            folders[ENSEMBLE] = folder / ENSEMBLE
        elif row["name"] == HYBRID:
            scores[HYBRID] = score_rows(read(Path(row["folder"])), metric)
            folders[HYBRID] = Path(row["folder"])
        elif "seeds" in row:
            dirs = list(runs[row["strategy"]].values())
            by_seed = {str(d): read(d) for d in dirs}
            if any(rows is None for rows in by_seed.values()):
                continue
            members[row["name"]] = dirs
            scores[row["name"]] = score(by_seed[str(dirs[0])], averaged(by_seed, tuple(by_seed)), metric)
            folders[row["name"]] = folder / f"{row['strategy']}-seeds"
    best = max(scores, key=lambda name: (scores[name], -list(scores).index(name)))
    if best in members:
        row = next(r for r in combined if r["name"] == best)
        if best == ENSEMBLE:
            # written already when the hybrid row was made from it (`ensemble.build_hybrid`), by this same compare
            if not any(r["name"] == HYBRID and r["members"][0] == ENSEMBLE for r in combined):
                write_ensemble_row(by_name, row, folder)
        else:
            make_ensemble(members[best], folders[best],
                          chosen_by=f"compare: the {len(row['members'])} seeds of {row['strategy']}, averaged")
    return {"row": best, "folder": str(folders[best]), "metric": metric, "validation": scores}


def write_ensemble_row(run_dirs: dict[str, Path], row: dict, folder: Path) -> Path:
    """compare's ensemble row (`row`, its members named by strategy, run folders in `run_dirs`) written as an
    ensemble folder, `folder`/ensemble (an earlier one there replaced); returns that folder."""
    from longbert.comparison.ensemble import ENSEMBLE

    output = folder / ENSEMBLE
    make_ensemble([run_dirs[m] for m in row["members"]], output,
                  chosen_by=f"compare: its ensemble row, {row['chosen_by']} among {row['groups_scored']} groups")
    return output
