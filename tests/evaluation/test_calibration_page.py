"""What a metrics page and its figures say of calibration: ECE, NLL, Brier score and mean confidence before and after
the model's calibration, ECE by length, accuracy against coverage in short, and the reliability diagram beside the
page; a metrics dict from before calibration was measured still renders, without that section."""

from __future__ import annotations

import numpy as np
import pytest

import longbert.evaluation.plots as plots
from longbert.evaluation.evaluate import metrics_markdown
from longbert.evaluation.metrics import compute_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NAMES = ["neg", "pos"]


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels, from a PNG's header."""
    assert png.startswith(PNG_MAGIC)
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def overconfident(documents: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """(calibrated, uncalibrated) (D, 2) probabilities, labels and lengths of a model right 80% of the time that
    says 97% before its calibration and about 80% after."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, documents)
    right = rng.random(documents) < 0.8
    predicted = np.where(right, labels, 1 - labels)
    confidence_before, confidence_after = rng.uniform(0.94, 1.0, documents), rng.uniform(0.7, 0.9, documents)

    def probabilities(confidence):
        p = np.empty((documents, 2))
        p[np.arange(documents), predicted], p[np.arange(documents), 1 - predicted] = confidence, 1 - confidence
        return p

    lengths = list(rng.choice([300, 800, 2000], documents))
    return probabilities(confidence_after), probabilities(confidence_before), labels, lengths


def calibrated_metrics() -> dict:
    """The test metrics of a calibrated model (`overconfident`'s documents), as `compute_metrics` gives them."""
    after, before, labels, lengths = overconfident()
    return compute_metrics(labels, after, lengths, NAMES, False, uncalibrated=before)


def test_the_page_gives_calibration_before_and_after_and_writes_the_reliability_diagram_beside_it(tmp_path):
    metrics = calibrated_metrics()
    section = metrics["calibration"]
    page = metrics_markdown(metrics, NAMES, "tiny: test", tmp_path / "confusion-matrix-test.png")
    assert page.index("## Calibration") < page.index("## Accuracy by document length")
    assert "| measure | before | after |" in page
    for key, name in (("ece", "ECE"), ("nll", "NLL"), ("brier", "Brier score"), ("mean_confidence", "mean confidence")):
        assert f"| {name} | {section['uncalibrated'][key]:.4f} | {section[key]:.4f} |" in page
    assert section["uncalibrated"]["ece"] > 0.1 > section["ece"]  # the numbers say what the data was built to say
    bucket = section["by_length"][">1024"]
    assert (f"| >1024 | {bucket['documents']} | {section['uncalibrated']['by_length']['>1024']['ece']:.4f} "
            f"| {bucket['ece']:.4f} |") in page
    half = next(p for p in section["coverage"] if p["coverage"] == 0.5)
    assert f"| 50% ({half['answered']}) | {half['accuracy']:.4f} | {half['threshold']:.4f} |" in page
    # The diagram beside the page, named after its confusion matrix's place, written whole (no temporary file).
    assert "![reliability diagram: accuracy against confidence](reliability-diagram-test.png)" in page
    assert [p.name for p in tmp_path.iterdir()] == ["reliability-diagram-test.png"]
    width, height = png_size((tmp_path / "reliability-diagram-test.png").read_bytes())
    assert 400 < width < 1000 and 400 < height < 1000


def test_metrics_from_before_calibration_was_measured_still_render_without_the_section(tmp_path):
    metrics = calibrated_metrics()
    del metrics["calibration"]  # as every metrics.json before it
    page = metrics_markdown(metrics, NAMES, "old: test", tmp_path / "confusion-matrix.png")
    assert "Calibration" not in page and "reliability" not in page and "| mean confidence |" not in page
    assert "## Accuracy by document length" in page and not any(tmp_path.iterdir())


def test_an_uncalibrated_multi_label_model_gets_one_column_and_its_exact_match_against_coverage():
    rng = np.random.default_rng(1)
    probabilities, labels = rng.random((40, 3)), rng.integers(0, 2, (40, 3))
    metrics = compute_metrics(labels, probabilities, [300] * 40, ["a", "b", "c"], True)
    page = metrics_markdown(metrics, ["a", "b", "c"], "tags: test")
    assert "| measure | value |" in page and "The model has no calibration" in page
    assert "| documents answered | exact match | confidence at least |" in page
    assert "| accuracy |" not in page  # a mean confidence per label is not an exact match's to match
    per_label = metrics["calibration"]["per_label"]
    assert "| label | ECE |" in page and all(f"| {n} | {per_label[n]['ece']:.4f} |" in page for n in "abc")
    assert "![" not in page


@pytest.fixture
def drawn(monkeypatch):
    figures = []
    monkeypatch.setattr(plots, "png", lambda fig, tight=True: figures.append(fig) or b"")
    return figures


def test_the_reliability_diagram_draws_each_bins_accuracy_at_its_confidence_and_counts_its_documents(drawn):
    section = calibrated_metrics()["calibration"]
    plots.reliability_diagram_png({"calibrated": section, "plain": {**section, "uncalibrated": None}})
    top, bottom = drawn[0].axes[:2]
    lines = {line.get_label().split(" (")[0]: line for line in top.get_lines()}
    assert set(lines) == {"perfectly calibrated", "before calibration", "after calibration"}
    after = lines["after calibration"]
    assert list(after.get_xdata()) == [b["confidence"] for b in section["bins"]]
    assert list(after.get_ydata()) == [b["accuracy"] for b in section["bins"]]
    assert f"ECE {section['ece']:.3f}" in after.get_label()
    counts = [t.get_text() for t in bottom.texts]
    assert {f"{b['count']:,}" for b in section["bins"] + section["uncalibrated"]["bins"]} == set(counts)
    plain = {line.get_label().split(" (")[0] for line in drawn[0].axes[2].get_lines()}
    assert plain == {"perfectly calibrated", "its probabilities"}  # a model without calibration: one series


def test_figures_are_pngs_of_a_readable_size():
    section = calibrated_metrics()["calibration"]
    one = png_size(plots.reliability_diagram_png({"tiny: test": section}, columns=1))
    four = png_size(plots.reliability_diagram_png({k: section for k in "abcd"}, columns=2))
    assert 400 < one[0] < 1000 and 400 < one[1] < 1000
    assert four[0] > 1.5 * one[0] and four[1] > 1.5 * one[1]
    curve = png_size(plots.coverage_curve_png({"a": section["coverage"], "b": section["uncalibrated"].get(
        "coverage", section["coverage"])}, 0.95, {"a": (0.5, 0.96)}, {"b": "--"}))
    assert 600 < curve[0] < 1200 and 400 < curve[1] < 900


@pytest.mark.parametrize("documents, choice, said", [
    (48, "auto", "validation holds 48 documents, and model.calibration auto fits a temperature only from 100"),
    (300, "none", "model.calibration is none"),
])
def test_a_model_left_uncalibrated_says_why_on_its_page(documents, choice, said):
    from longbert.modeling.calibration import fit_calibration

    rng = np.random.default_rng(2)
    probabilities = rng.dirichlet([1, 1], documents)
    calibration = fit_calibration(probabilities, rng.integers(0, 2, documents), False, choice=choice)
    assert calibration.method == "none" and said in calibration.reason
    metrics = compute_metrics(rng.integers(0, 2, 40), rng.dirichlet([1, 1], 40), [300] * 40, NAMES, False)
    metrics["calibration"]["why_none"] = calibration.reason  # as training's end records it
    page = metrics_markdown(metrics, NAMES, "small: test")
    assert f"The model has no calibration: its probabilities are the network's. Why: {calibration.reason}.\n\n" in page



def test_a_forced_temperature_that_may_not_hold_says_so_on_its_page():
    metrics = calibrated_metrics()
    metrics["calibration"]["caveat"] = "fitted on 1 validation document, fewer than the 100 model.calibration auto " \
        "asks for, so the temperature may not hold on new documents"  # as training's end records it
    page = metrics_markdown(metrics, NAMES, "small: test")
    assert ("divided by the temperature fitted on validation. The temperature was fitted on 1 validation document, "
            "fewer than the 100") in page
    assert "The temperature was" not in metrics_markdown(calibrated_metrics(), NAMES, "small: test")
