"""compare's rows that combine strategies already trained in the same comparison, at no training cost, each chosen on
the validation split (each run's predictions-validation.jsonl, written by its kept model), never on the test split:

    ensemble   the test probabilities of two or more runs, averaged: every group of runs from two strategies or
               more is scored on validation (past EXHAUSTIVE_UP_TO runs, groups grown by forward selection), and
               the best group's test rows become one more row of the report. With `compare --seeds N` every seed's
               run of every strategy is a candidate, named as compare names it ('chunk', 'chunk-seed43')
    hybrid     the run best on validation, mixed with TF-IDF over its own token ids (`longbert hybrid`,
               longbert.training.hybrid): a model folder of its own under that run, <run>/hybrid/; or the ensemble
               row mixed with TF-IDF, when the ensemble scores higher on validation than every run alone

    seeds      with `compare --seeds N`, one row per strategy: its N runs (seeds s0 ... s0 + N - 1, the same documents)
               with their test probabilities averaged, and the spread of the single runs (mean ± sd); nothing is
               chosen, so nothing needs validation

Every such row is paired against every other row of the report.

Single-label only: averaged multi-label probabilities would need thresholds of their own, tuned on validation; that
is not done, and the report says so."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from longbert.evaluation.predictions import PredictionRow, read_prediction_rows
from longbert.utils.folders import HYBRID

ENSEMBLE = "ensemble"
VALIDATION_FILE = "predictions-validation.jsonl"
SELECTION_METRICS = ("accuracy", "macro_f1")  # best_metric values an ensemble can be chosen by; loss falls back


def read_kept(run_dir: Path, name: str) -> list[PredictionRow] | None:
    """The rows of a run folder's kept prediction file `name` (predictions-<split>.jsonl), or None when it has none."""
    path = Path(run_dir) / name
    return read_prediction_rows(path) if path.is_file() else None


def read_validation(run_dir: Path) -> list[PredictionRow] | None:
    """A run folder's validation prediction rows, or None for a run that has none (trained before they were kept)."""
    return read_kept(run_dir, VALIDATION_FILE)


def selection_metric(best_metric: str) -> str:
    """The metric a combined row (ensemble, seeds, the model to deploy) is chosen by: the recipe's best_metric, or
    macro_f1 where that is loss, which a hard prediction has not."""
    return best_metric if best_metric in SELECTION_METRICS else "macro_f1"


def validation_of(run_dirs: dict[str, Path], metric: str, row: str) -> tuple[dict | None, str, str | None]:
    """(each run's validation rows, the metric a combined row is chosen by, None), or (None, metric, why `row` cannot
    be chosen) when a run kept no validation predictions. `metric`: the recipe's best_metric; loss, which a hard
    prediction has not, falls back to macro_f1."""
    metric = selection_metric(metric)
    validation = {s: read_validation(d) for s, d in run_dirs.items()}
    missing = [s for s, rows in validation.items() if rows is None]
    if missing:
        return None, metric, (f"no {row} row: {', '.join(missing)} kept no validation predictions "
                              f"({VALIDATION_FILE}; runs trained before they were kept): train them again to have one")
    return validation, metric, None


def score(rows: list[PredictionRow], probabilities: np.ndarray, metric: str) -> float:
    """Accuracy or macro-F1 of argmax(probabilities) against the rows' labels."""
    from sklearn.metrics import f1_score

    truth = np.array([r.label for r in rows])
    predicted = probabilities.argmax(1)
    if metric == "accuracy":
        return float((predicted == truth).mean())
    return float(f1_score(truth, predicted, labels=list(range(probabilities.shape[1])), average="macro",
                          zero_division=0))


def score_rows(rows: list[PredictionRow], metric: str) -> float:
    """Accuracy or macro-F1 of one run's prediction rows (their own probabilities)."""
    return score(rows, np.array([r.probabilities for r in rows]), metric)


def averaged(rows_by_member: dict[str, list[PredictionRow]], members: tuple[str, ...]) -> np.ndarray:
    """(D, C) mean of the members' probabilities, document by document."""
    return np.mean([[r.probabilities for r in rows_by_member[m]] for m in members], axis=0)


EXHAUSTIVE_UP_TO = 10  # runs: every group of two or more is scored (1,013 groups at 10); past it, forward selection


def choose_members(validation: dict[str, list[PredictionRow]], metric: str,
                   strategy_of: dict[str, str] | None = None) -> tuple[tuple[str, ...], float, int]:
    """(members, their validation score, how many groups were scored): the group of two or more runs whose averaged
    validation probabilities score best by `metric` (accuracy or macro_f1). `strategy_of` (run -> strategy, for
    compare --seeds) keeps to groups of two strategies or more: one strategy's seeds averaged are its seed row.
    Up to EXHAUSTIVE_UP_TO runs every group is scored; ties go to the smaller group, then to the group whose runs
    come first in `validation`'s order. Past it, `forward_selection`."""
    names = list(validation)
    mixed = _mixed(strategy_of)
    if len(names) > EXHAUSTIVE_UP_TO:
        return forward_selection(validation, metric, mixed)
    groups = [g for size in range(2, len(names) + 1) for g in itertools.combinations(names, size) if mixed(g)]
    return _best_group(validation, groups, metric) + (len(groups),)


def forward_selection(validation: dict[str, list[PredictionRow]], metric: str,
                      allowed=lambda group: True) -> tuple[tuple[str, ...], float, int]:
    """choose_members' answer for many runs, as Caruana et al. (2004) select an ensemble from a library of models:
    the best pair (of those `allowed`), then, one run at a time, the run whose addition raises the group's
    validation score most, until no run raises it. Each run joins at most once. Scores O(n²) groups, not 2^n."""
    names = list(validation)
    groups = [g for g in itertools.combinations(names, 2) if allowed(g)]
    members, best = _best_group(validation, groups, metric)
    while len(members) < len(names):
        grown = [members + (n,) for n in names if n not in members]
        groups += grown
        candidate, value = _best_group(validation, grown, metric)
        if value <= best:
            break
        members, best = candidate, value
    return members, best, len(groups)


def _mixed(strategy_of: dict[str, str] | None):
    """A test of a group: True when its runs come from two strategies or more (always, with no `strategy_of`)."""
    if strategy_of is None:
        return lambda group: True
    return lambda group: len({strategy_of[name] for name in group}) > 1


def _best_group(validation: dict[str, list[PredictionRow]], groups: list[tuple[str, ...]],
                metric: str) -> tuple[tuple[str, ...], float]:
    """(the group whose averaged validation probabilities score best, its score); ties go to the smaller group, then
    to the earlier one in `groups`."""
    first = next(iter(validation.values()))
    scored = [(score(first, averaged(validation, g), metric), -len(g), -i) for i, g in enumerate(groups)]
    best = max(range(len(groups)), key=lambda i: scored[i])
    return groups[best], scored[best][0]


def scored(rows: list[PredictionRow], label_names: list[str]) -> dict:
    """The test metrics (`compute_metrics`) of single-label prediction rows."""
    from longbert.evaluation.metrics import compute_metrics

    return compute_metrics(np.array([r.label for r in rows]), np.array([r.probabilities for r in rows]),
                           [r.n_tokens for r in rows], label_names, False)


def scored_average(test: dict, members: tuple, label_names: list[str]) -> tuple[list[PredictionRow], dict]:
    """(the members' averaged test rows, their test metrics), for a row that averages runs' probabilities."""
    rows = ensemble_rows(test, members)
    return rows, scored(rows, label_names)


def ensemble_rows(test: dict[str, list[PredictionRow]], members: tuple[str, ...]) -> list[PredictionRow]:
    """The ensemble's test prediction rows: the members' averaged probabilities, for the first member's documents."""
    probabilities = averaged(test, members)
    first = test[members[0]]
    return [PredictionRow(index=r.index, n_tokens=r.n_tokens, label=r.label,
                          probabilities=[float(p) for p in probs], predicted=int(probs.argmax()))
            for r, probs in zip(first, probabilities)]


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
    rows, metrics = scored_average(test, members, label_names)
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
    from longbert.comparison.ensemble_folder import write_ensemble_row
    from longbert.comparison.results import PREDICTIONS_FILE
    from longbert.training.hybrid import make_hybrid

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
    summary = make_hybrid(source, output, corpus=splits())
    rows = read_prediction_rows(output / PREDICTIONS_FILE)
    return ({"name": HYBRID, "members": [base, "tfidf"], "mix": summary["mix"], "C": summary["C"],
             "chosen_by": summary["chosen_by"], "base_chosen_by": metric, "validation": summary["validation"],
             "folder": str(output), "metrics": summary["test"]}, rows, None)


def seeds_name(strategy: str, seeds: int) -> str:
    """A seed-ensemble row's name: 'truncate × 5 seeds'."""
    return f"{strategy} × {seeds} seeds"


def build_seed_ensembles(test: dict[str, dict[int, list[PredictionRow]]], multi_label: bool, label_names: list[str],
                         long_tokens: int) -> tuple[list[dict], dict[str, list[PredictionRow]], str | None]:
    """([one summary per strategy], {row name: its test rows}, None), or ([], {}, why there are none), from each
    strategy's test rows by seed (`test[strategy][seed]`, every seed's rows in the same document order). A summary
    holds the seeds, each seed's accuracy, macro-F1 and accuracy on the documents over `long_tokens`, their mean and
    sample standard deviation, and the metrics of the averaged probabilities."""
    from longbert.comparison.results import test_summary

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
        rows, metrics = scored_average(by_seed, tuple(seeds), label_names)
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
