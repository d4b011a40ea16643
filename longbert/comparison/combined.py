"""compare's rows that combine strategies already trained in the same comparison, at no training cost, each chosen on
the validation split (each run's predictions-validation.jsonl, written by its kept model), never on the test split
(`longbert.ensembles.choice`):

    ensemble   the test probabilities of two or more runs, averaged: every group of runs from two strategies or
               more is scored on validation (past EXHAUSTIVE_UP_TO runs, groups grown by forward selection), and
               the best group's test rows become one more row of the report. With `compare --seeds N` every seed's
               run of every strategy is a candidate, named as compare names it ('chunk', 'chunk-seed43')
    hybrid     the run best on validation, mixed with TF-IDF over its own token ids (`longbert hybrid`,
               longbert.ensembles.hybrid): a model folder of its own under that run, <run>/hybrid/; or the ensemble
               row mixed with TF-IDF, when the ensemble scores higher on validation than every run alone

    seeds      with `compare --seeds N`, one row per strategy: its N runs (seeds s0 ... s0 + N - 1, the same documents)
               with their test probabilities averaged, and the spread of the single runs (mean ± sd); nothing is
               chosen, so nothing needs validation

Every such row is paired against every other row of the report. And the model compare deploys (`deployable`): of
every row a folder can hold, the one best on validation, written as a folder where it is not one yet.

Single-label only: averaged multi-label probabilities would need thresholds of their own, tuned on validation; that
is not done, and the report says so."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from longbert.comparison.report_numbers import test_summary
from longbert.ensembles.choice import (
    EXHAUSTIVE_UP_TO,
    average_calibration,
    averaged,
    averaged_rows,
    choose_members,
    read_validation,
    score,
    score_rows,
    scored,
    validation_of,
)
from longbert.ensembles.ensemble_folder import make_ensemble
from longbert.ensembles.hybrid import make_hybrid
from longbert.evaluation.predictions import PredictionRow, read_prediction_rows
from longbert.utils.folders import HYBRID, RunFolder

ENSEMBLE = "ensemble"  # the ensemble row's name in reports, and its folder's beside the runs


def scored_average(test: dict, members: tuple, label_names: list[str],
                   validation: dict | None = None) -> tuple[list[PredictionRow], dict]:
    """(the members' averaged test rows, their test metrics), for a row that averages runs' probabilities: calibrated
    as the ensemble folder of the same members answers, by a calibration fitted on their `validation` rows (none
    without them)."""
    rows = averaged_rows(test, members, label_names, average_calibration(validation, members))
    return rows, scored(rows, label_names)


def build_ensemble(run_dirs: dict[str, Path], test: dict[str, list[dict]], metric: str, multi_label: bool,
                   label_names: list[str], strategy_of: dict[str, str] | None = None
                   ) -> tuple[dict | None, list[dict] | None, str | None]:
    """(the ensemble's summary, its test rows, None) or (None, None, why there is none) for a comparison's trained
    runs (`run_dirs` and `test` rows keyed by run name, in report order: strategies, then their other seeds;
    `strategy_of` each run's strategy, where runs are seeds). `metric`: the recipe's best_metric (loss, which a hard
    prediction has not, falls back to macro_f1)."""
    if multi_label:
        return None, None, "no ensemble row: averaged multi-label probabilities would need thresholds of their own"
    if len(set((strategy_of or {n: n for n in run_dirs}).values())) < 2:
        return None, None, None
    validation, metric, why = validation_of(run_dirs, metric, ENSEMBLE)
    if validation is None:
        return None, None, why
    members, validation_score, candidates = choose_members(validation, metric, strategy_of)
    rows, metrics = scored_average(test, members, label_names, validation)
    how = f"validation {metric}" + (", by forward selection," if len(run_dirs) > EXHAUSTIVE_UP_TO else "")
    summary = {"name": ENSEMBLE, "members": list(members), "chosen_by": how,
               "validation": validation_score, "groups_scored": candidates, "metrics": metrics}
    return summary, rows, None


def build_hybrid(run_dirs: dict[str, Path], metric: str, multi_label: bool, splits, ensemble: dict | None = None,
                 folder: Path | None = None) -> tuple[dict | None, list[dict] | None, str | None]:
    """(the hybrid row's summary, its test rows, None) or (None, None, why there is none): `longbert hybrid` made from
    the run whose validation predictions score best by `metric` (ties: the earlier run), or from the `ensemble`
    row when its validation score is higher still. That ensemble is then written as a folder, `folder`/ensemble, and
    the hybrid of it to `folder`/hybrid; a strategy's hybrid goes to its run folder's hybrid/. `splits()` gives the
    comparison's tokenized Corpus."""
    if multi_label:
        return None, None, "no hybrid row: hybrid models are single-label only"
    validation, metric, why = validation_of(run_dirs, metric, HYBRID)
    if validation is None:
        return None, None, why
    names = list(run_dirs)
    base = max(names, key=lambda s: (score_rows(validation[s], metric), -names.index(s)))
    source, output = run_dirs[base], run_dirs[base] / HYBRID
    if ensemble is not None and folder is not None and ensemble["validation"] > score_rows(validation[base], metric):
        base, source, output = ENSEMBLE, write_ensemble_row(run_dirs, ensemble, folder), folder / HYBRID
    summary = make_hybrid(source, output, corpus=splits()).metrics
    rows = read_prediction_rows(RunFolder(output).predictions("test"))
    return ({"name": HYBRID, "members": [base, "tfidf"], "mix": summary["mix"], "C": summary["C"],
             "chosen_by": summary["chosen_by"], "base_chosen_by": metric, "validation": summary["validation"],
             "folder": str(output), "metrics": summary["test"]}, rows, None)


def seeds_name(strategy: str, seeds: int) -> str:
    """A seed-ensemble row's name: 'truncate × 5 seeds'."""
    return f"{strategy} × {seeds} seeds"


def build_seed_ensembles(test: dict[str, dict[int, list[PredictionRow]]], multi_label: bool, label_names: list[str],
                         long_tokens: int, validation: dict[str, dict[int, list[PredictionRow] | None]] | None = None
                         ) -> tuple[list[dict], dict[str, list[PredictionRow]], str | None]:
    """([one summary per strategy], {row name: its test rows}, None), or ([], {}, why there are none), from each
    strategy's test rows by seed (`test[strategy][seed]`, every seed's rows in the same document order). A summary
    holds the seeds, each seed's accuracy, macro-F1 and accuracy on the documents over `long_tokens`, their mean and
    sample standard deviation, and the metrics of the averaged probabilities (calibrated on the seeds' `validation`
    rows, by strategy and seed, where every seed kept them)."""
    if multi_label:
        return [], {}, "no seed-ensemble rows: averaged multi-label probabilities would need thresholds of their own"
    summaries, rows_by_name = [], {}
    for strategy, by_seed in test.items():
        seeds = sorted(by_seed)
        per_seed = {}
        for seed in seeds:
            summary = test_summary(by_seed[seed], scored(by_seed[seed], label_names), long_tokens)
            per_seed[seed] = {"accuracy": summary["accuracy"], "macro_f1": summary["macro_f1"],
                              "long_accuracy": summary["long"]["accuracy"]}
        name = seeds_name(strategy, len(seeds))
        rows, metrics = scored_average(by_seed, tuple(seeds), label_names, (validation or {}).get(strategy))
        spread = {key: spread_of([per_seed[k][key] for k in seeds]) for key in ("accuracy", "macro_f1",
                                                                                "long_accuracy")}
        summaries.append({"name": name, "strategy": strategy, "members": [f"seed {k}" for k in seeds],
                          "seeds": seeds, "per_seed": {str(k): v for k, v in per_seed.items()}, "spread": spread,
                          "metrics": metrics})
        rows_by_name[name] = rows
    return summaries, rows_by_name, None


def spread_of(values: list) -> dict | None:
    """{mean, sd (sample, ddof 1; 0 for one value), min, max} of the values, or None when any is missing."""
    if not values or any(v is None for v in values):
        return None
    array = np.asarray(values, dtype=float)
    return {"mean": float(array.mean()), "sd": float(array.std(ddof=1)) if len(array) > 1 else 0.0,
            "min": float(array.min()), "max": float(array.max())}
def deployable(runs: dict[str, dict[str, Path]], combined: list[dict], folder: Path, metric: str) -> dict | None:
    """compare's model to deploy: of every row a folder can hold (each strategy's run; the ensemble, written here as
    an ensemble folder under `folder`; the hybrid's folder; each strategy's seeds averaged, written as an ensemble
    folder), the one whose validation predictions score best by `metric` (accuracy or macro_f1); ties go to the
    earlier row, strategies first. Chosen on validation, never on test. `runs`: each strategy's run folders by run
    name ('chunk', 'chunk-seed43'), its base seed's first. Returns {row, folder, metric, validation: {row: score}},
    or None when some run kept no validation predictions."""
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
            # written already when the hybrid row was made from it (`build_hybrid`), by this same compare
            if not any(r["name"] == HYBRID and r["members"][0] == ENSEMBLE for r in combined):
                write_ensemble_row(by_name, row, folder)
        else:
            make_ensemble(members[best], folders[best],
                          chosen_by=f"compare: the {len(row['members'])} seeds of {row['strategy']}, averaged")
    return {"row": best, "folder": str(folders[best]), "metric": metric, "validation": scores}


def write_ensemble_row(run_dirs: dict[str, Path], row: dict, folder: Path) -> Path:
    """compare's ensemble row (`row`, its members named by strategy, run folders in `run_dirs`) written as an
    ensemble folder, `folder`/ensemble (an earlier one there replaced); returns that folder."""
    output = folder / ENSEMBLE
    make_ensemble([run_dirs[m] for m in row["members"]], output,
                  chosen_by=f"compare: its ensemble row, {row['chosen_by']} among {row['groups_scored']} groups")
    return output
