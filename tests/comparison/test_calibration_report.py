"""What compare's report says of calibration and abstention: every row's ECE, NLL and Brier score before and after its
calibration (from its test metrics, or measured from its prediction rows for a run evaluated before they held them),
the confidence threshold that reaches the target accuracy chosen on validation and reported on test, the reliability
diagrams and the coverage curve; a report from before all this renders as it did."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np

import longbert.comparison.report_numbers as numbers
from helpers import prediction_rows
from longbert.comparison.figures import make_plots
from longbert.comparison.page import build_blocks
from longbert.comparison.render import render_again
from longbert.comparison.report_numbers import TARGET_ACCURACY, abstention, measured_calibration
from longbert.comparison.verdict import verdict
from longbert.evaluation.reliability import calibration_metrics

COMMITTED = Path(__file__).resolve().parents[2] / "reports" / "compare_imdb"


def rows_at(confidences: list[float], right: list[bool]):
    """Two-class prediction rows: each document's top class at its confidence, right or not."""
    return prediction_rows([1 if r else 0 for r in right], [[1 - c, c] for c in confidences])


def test_the_threshold_is_chosen_on_validation_and_what_it_answers_is_measured_on_test():
    # Validation: the 10 surest of 20 are right, the rest wrong: 95% is reached answering those 10 (from 0.90 up).
    validation = rows_at([0.99 - 0.01 * k for k in range(10)] + [0.80 - 0.01 * k for k in range(10)],
                         [True] * 10 + [False] * 10)
    # Test: 4 documents at 0.90 or more, one of them wrong; on test alone 95% would need a threshold above 0.95.
    test = rows_at([0.99, 0.95, 0.93, 0.91, 0.85, 0.7, 0.6, 0.55, 0.52, 0.51], [True, True, False] + [True] * 7)
    chosen = abstention(validation, test, 0.95)
    assert chosen["threshold"] == 0.90
    assert chosen["validation"] == {"documents": 20, "answered": 10, "coverage": 0.5, "accuracy": 1.0}
    assert chosen["test"] == {"documents": 10, "answered": 4, "coverage": 0.4, "accuracy": 0.75}
    # Swapped, the threshold follows the rows given as validation: never the test rows'.
    assert abstention(test, validation, 0.95)["threshold"] == 0.95
    assert abstention(None, test, 0.95) is None
    unreachable = abstention(rows_at([0.9, 0.8], [False, False]), test, 0.95)
    assert unreachable["threshold"] is None and unreachable["test"] is None


def test_a_rows_calibration_comes_from_its_test_metrics_or_else_from_its_prediction_rows():
    rows = rows_at([0.99, 0.97, 0.9, 0.95], [True, False, True, True])
    test = {"macro_f1": 0.7, "documents": 4, "by_length": {"<=512": {"documents": 4, "accuracy": 0.75}}}
    old = numbers.test_summary(rows, test, 512)["calibration"]  # metrics from before calibration was measured
    probabilities = np.array([r.probabilities for r in rows])
    assert old["ece"] == calibration_metrics(probabilities, np.array([1, 0, 1, 1]))["ece"]
    assert "uncalibrated" not in old and [p["answered"] for p in old["coverage"]][-1] == 4
    kept = {"ece": 0.01, "nll": 0.2, "brier": 0.1, "mean_confidence": 0.8, "bins": [], "by_length": {}, "coverage": []}
    assert numbers.test_summary(rows, {**test, "calibration": kept}, 512)["calibration"] is kept
    assert numbers.test_summary([], test, 512)["calibration"] is None


def before_calibration(results: dict) -> dict:
    """A report's results as compare wrote them before it measured calibration: no row's calibration or abstention,
    no reliability diagram or coverage curve."""
    rows = [*results["strategies"].values(), *(results.get(k) for k in ("ensemble", "hybrid", "baseline")),
            *(results.get("seed_ensembles") or {}).values()]
    for entry in rows:
        if isinstance(entry, dict):
            entry.pop("calibration", None)
            entry.pop("abstention", None)
    results.pop("target_accuracy", None)
    for key in ("reliability", "coverage"):
        (results.get("plots") or {}).pop(key, None)
    return results


def calibrated_results() -> dict:
    """The committed compare_imdb report's results as before calibration, each strategy then given a calibration
    (measured from rows whose uncalibrated probabilities say 0.99) and an abstention, its chunk row deployed."""
    results = before_calibration(json.loads((COMMITTED / "results.json").read_text()))
    rng = np.random.default_rng(0)
    for entry in results["strategies"].values():
        confidence = rng.uniform(0.6, 1.0, 300)
        rows = rows_at(list(confidence), list(rng.random(300) < confidence))  # right as often as it says
        rows = [dataclasses.replace(r, uncalibrated=[0.01, 0.99], n_tokens=600 + 300 * (i % 3))
                for i, r in enumerate(rows)]
        entry["calibration"] = measured_calibration(rows)
        entry["abstention"] = abstention(rows[:150], rows[150:], TARGET_ACCURACY)
    results["target_accuracy"] = TARGET_ACCURACY
    results["deployable"]["row"] = "chunk"
    results.pop("plots", None)
    return results


def texts(blocks: list[tuple]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def test_the_report_gives_every_rows_calibration_before_and_after_and_its_abstention():
    results = calibrated_results()
    for name, accuracy in (("truncate", 0.96), ("bigbird", 0.9)):
        results["strategies"][name]["abstention"]["test"]["accuracy"] = accuracy
    results["plots"] = {key: key for key in make_plots(results)}
    assert {"reliability", "coverage"} <= set(results["plots"])
    blocks = build_blocks(results)
    table = next(b for b in blocks if b[0] == "table" and b[1][:3] == ["row", "accuracy", "mean confidence"])[2]
    chunk = results["strategies"]["chunk"]["calibration"]
    row = next(r for r in table if r[0] == "chunk")
    assert row[3] == f"{chunk['uncalibrated']['ece']:.3f} → {chunk['ece']:.3f}"
    assert row[4] == f"{chunk['uncalibrated']['nll']:.3f} → {chunk['nll']:.3f}"
    assert {r[0] for r in table} == {"truncate", "chunk", "bigbird"}  # the rows without calibration are left out
    by_length = next(b for b in blocks if b[0] == "table" and b[1][0] == "row" and b[1][1].startswith("513"))[2]
    long = chunk["by_length"][">1024"]
    assert f"{chunk['uncalibrated']['by_length']['>1024']['ece']:.3f} → {long['ece']:.3f}" in by_length[1]
    chosen = results["strategies"]["chunk"]["abstention"]
    abstaining = next(b for b in blocks if b[0] == "table" and b[1][0] == "row" and "chosen on validation" in b[1][1])
    assert next(r for r in abstaining[2] if r[0] == "chunk")[1] == f"{chosen['threshold']:.3f}"
    said = (f"the threshold that reached 95.0% accuracy on validation), it answers "
            f"{100 * chosen['test']['coverage']:.1f}% of the test documents at {100 * chosen['test']['accuracy']:.1f}%")
    assert said in texts(blocks) and any(said in line for line in verdict(results))
    short = next(b[1][0][0] for b in blocks if b[0] == "p" and isinstance(b[1], list) and "short of" in b[1][0][0])
    assert "bigbird" in short and "truncate" not in short  # the rows whose test accuracy is below the target
    assert ("img", "reliability", "reliability diagrams: accuracy against confidence, before and after calibration, "
            "with each bin's documents") in blocks and "img" in [b[0] for b in blocks if "coverage" in b]


def test_a_multi_label_report_gives_each_labels_ece_before_and_after():
    results = calibrated_results()
    section = results["strategies"]["truncate"]["calibration"]
    section["per_label"] = {"sports": {"ece": 0.02}, "politics": {"ece": 0.03}}
    section["uncalibrated"]["per_label"] = {"sports": {"ece": 0.12}, "politics": {"ece": 0.13}}
    table = next(b for b in build_blocks(results) if b[0] == "table" and b[1][0] == "label")
    assert table[1] == ["label", "truncate"]  # the rows that measured their labels
    assert table[2] == [["sports", "0.120 → 0.020"], ["politics", "0.130 → 0.030"]]


def test_the_figures_show_the_deployed_model_first_and_every_rows_coverage(monkeypatch):
    import longbert.evaluation.plots as plots

    drawn = []
    monkeypatch.setattr(plots, "png", lambda fig, tight=True: drawn.append(fig) or b"")
    results = calibrated_results()
    make_plots(results)
    reliability, coverage = drawn[-2:]
    titles = [ax.get_title() for ax in reliability.axes if ax.get_title()]
    assert titles == ["chunk (the model to deploy)", "truncate", "bigbird"]
    curves = [line.get_label() for line in coverage.axes[0].get_lines() if not line.get_label().startswith("_")]
    assert curves[:3] == ["truncate", "chunk", "bigbird"] and "at the threshold chosen on validation" in curves
    line = next(x for x in coverage.axes[0].get_lines() if x.get_label() == "chunk")
    assert list(line.get_ydata()) == [p["accuracy"] for p in results["strategies"]["chunk"]["calibration"]["coverage"]]


def test_a_report_from_before_calibration_renders_again_without_its_sections(tmp_path):
    report = tmp_path / "compare_imdb"
    shutil.copytree(COMMITTED, report)
    (report / "results.json").write_text(json.dumps(before_calibration(json.loads((report / "results.json")
                                                                                   .read_text()))))
    for plot in ("reliability-diagram.png", "coverage-curve.png"):
        (report / plot).unlink(missing_ok=True)
    before = copy.deepcopy(json.loads((report / "results.json").read_text()))
    render_again(report)
    page = (report / "report.md").read_text()
    assert "Verdict" in page and "Calibration" not in page and "Abstention" not in page
    assert not (report / "reliability-diagram.png").exists() and not (report / "coverage-curve.png").exists()
    assert json.loads((report / "results.json").read_text())["strategies"] == before["strategies"]
