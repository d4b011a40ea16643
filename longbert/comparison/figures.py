"""The comparison report's figures: which ones the results allow, and the numbers each shows, read from the results
dict (accuracy by length bucket per row beside the baseline, throughput and memory against document length, a
confusion matrix per strategy, the reliability diagrams of the model to deploy and of each strategy, every row's
accuracy against the share of documents it answers); evaluation/plots.py draws them as PNG bytes."""

from __future__ import annotations

from longbert.comparison.formatting import combined_label, combined_rows, labelled_rows
from longbert.comparison.statistics import wilson_interval
from longbert.config import is_multi_label
from longbert.data.lengths import BUCKET_NAMES, BUCKET_TITLES
from longbert.evaluation.plots import (
    accuracy_by_length_png,
    confusion_matrices_png,
    coverage_curve_png,
    reliability_diagram_png,
    speed_by_length_png,
)
from longbert.utils.folders import REPORT_PLOTS

PLOTS = REPORT_PLOTS  # the file each plot is written to beside report.md (named in utils/folders.py)


def make_plots(results: dict) -> dict[str, bytes]:
    """{plot key: PNG bytes} for the plots the results allow."""
    names, s = results["strategy_order"], results["strategies"]
    plots = {"accuracy_by_length": _accuracy_by_length(results)}
    if any(s[n].get("speed_by_length") for n in names):
        plots["speed_by_length"] = _speed_by_length(results)
    if not is_multi_label(results["problem_type"]):
        plots["confusion_matrices"] = confusion_matrices_png({n: s[n]["confusion_matrix"] for n in names},
                                                             results["label_names"])
    sections = reliability_sections(results)
    if sections:
        plots["reliability"] = reliability_diagram_png(sections, columns=2 if len(sections) == 4 else 3)
    curves = {label: row["calibration"]["coverage"] for label, row in labelled_rows(results).items()
              if row.get("calibration")}
    if curves:
        plots["coverage"] = _coverage(results, curves)
    return plots


def deployed_label(results: dict) -> str | None:
    """The label of the row compare deploys (`results["deployable"]`), None when there is none."""
    row = (results.get("deployable") or {}).get("row")
    return next((label for label, entry in labelled_rows(results).items() if entry.get("name", label) == row), None)


def reliability_sections(results: dict) -> dict[str, dict]:
    """The reliability diagrams a report shows, {title: calibration section}: the deployed model's first, then each
    strategy's (the combined rows and the baseline have theirs in results.json)."""
    rows = labelled_rows(results)
    deployed = deployed_label(results)
    shown = ([deployed] if deployed else []) + [n for n in results["strategy_order"] if n != deployed]
    return {(f"{label} (the model to deploy)" if label == deployed else label): rows[label]["calibration"]
            for label in shown if rows[label].get("calibration")}


def _coverage(results: dict, curves: dict[str, list[dict]]) -> bytes:
    """Every row's accuracy against the share of test documents it answers, each row's point at the threshold chosen
    on validation starred, the target accuracy dashed; the baseline's line dashed."""
    rows = labelled_rows(results)
    chosen = {label: (row["abstention"]["test"]["coverage"], row["abstention"]["test"]["accuracy"])
              for label, row in rows.items() if ((row.get("abstention") or {}).get("test") or {}).get("answered")}
    base = results.get("baseline")
    return coverage_curve_png(curves, results.get("target_accuracy"), chosen,
                              {f"{base['name']} (baseline)": "--"} if base else None)


def _accuracy_by_length(results: dict) -> bytes:
    """Each row's accuracy, overall first and then per length bucket, with its 95% Wilson interval: the strategies,
    the combined rows and the baseline. Buckets without test documents, or holding all of them (the "all" group
    again), are left out."""
    first = results["strategies"][results["strategy_order"][0]]
    groups = [("all", first["documents"])] + [(b, first["by_length"].get(b, {}).get("documents", 0))
                                              for b in BUCKET_NAMES]
    groups = groups[:1] + [(g, n) for g, n in groups[1:] if n and n != groups[0][1]]

    def points(row: dict) -> list:
        return [_point(row if group == "all" else row["by_length"].get(group, {})) for group, _ in groups]

    base = results.get("baseline")
    return accuracy_by_length_png(
        [f"{BUCKET_TITLES.get(g, g)}\n(n={n})" for g, n in groups],
        {n: points(results["strategies"][n]) for n in results["strategy_order"]},
        {combined_label(c): points(c) for c in combined_rows(results)},
        {f"{base['name']} (baseline)": points(base)} if base else {})


def _point(point: dict) -> tuple[float, float, float] | None:
    """(accuracy, low, high) of a row's group, its interval recorded or else Wilson's; None without documents."""
    if point.get("accuracy") is None or not point.get("documents"):
        return None
    accuracy = point["accuracy"]
    low, high = point.get("accuracy_ci95") or wilson_interval(round(accuracy * point["documents"]), point["documents"])
    return accuracy, low, high


def _speed_by_length(results: dict) -> bytes:
    """Each strategy's timed buckets, shortest first: (mean tokens, documents per second, memory inference added)."""
    names, s = results["strategy_order"], results["strategies"]
    series = {}
    for n in names:
        points = sorted((r for r in (s[n].get("speed_by_length") or {}).values() if r.get("documents")),
                        key=lambda r: r["mean_tokens"])
        series[n] = [(r["mean_tokens"], r["documents_per_second"], r.get("added_memory_mb", r["peak_memory_mb"]))
                     for r in points]
    kinds = {r.get("memory_kind") for n in names for r in (s[n].get("speed_by_length") or {}).values()} - {None}
    return speed_by_length_png(series, sorted(kinds))
