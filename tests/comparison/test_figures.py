"""What compare's figures show a person: accuracy on an axis that spans the intervals (not 0 to 1), each point with
its 95% interval, no group without test documents; throughput on a log axis with plain numbers, and memory from 0.
Read from the figures matplotlib draws, on a committed report's results.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import longbert.comparison.figures as report_figures
import longbert.evaluation.plots as plots

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "reports" / "compare_imdb" / "results.json"


def committed(name: str) -> dict:
    """A committed report's results.json: a canonical one in reports/, an experiment's in benchmarks/reports/."""
    folder = ROOT / "reports" / name
    return json.loads(((folder if folder.is_dir() else ROOT / "benchmarks" / "reports" / name) / "results.json")
                      .read_text())


@pytest.fixture
def figures(monkeypatch):
    drawn = []

    def keep(fig, tight=True):
        drawn.append(fig)
        return b""

    monkeypatch.setattr(plots, "png", keep)
    return drawn


def test_accuracy_is_points_with_intervals_on_an_axis_that_spans_them_and_empty_buckets_are_left_out(figures):
    results = json.loads(REPORT.read_text())
    empty = next(b for b in report_figures.BUCKET_NAMES if not results["strategies"]["chunk"]["by_length"].get(b, {})
                 .get("documents"))  # compare_imdb's test reviews are all over 512 tokens
    report_figures.make_plots(results)
    ax = figures[0].axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[0].startswith("all") and not any(report_figures.BUCKET_TITLES.get(empty, empty) in t for t in ticks)
    low, high = ax.get_ylim()
    accuracies = [r["accuracy"] for r in results["strategies"].values()]
    assert 0.5 < low < min(accuracies) and max(accuracies) < high <= 1.0
    chunk = results["strategies"]["chunk"]
    bars = [c for c in ax.containers if c.get_label() == "chunk"][0]
    _, caps, (lines,) = bars
    overall = lines.get_segments()[0]  # the first point: all documents
    assert [round(y, 6) for y in (overall[0][1], overall[1][1])] == [round(v, 6) for v in chunk["accuracy_ci95"]]


def test_throughput_ticks_are_plain_numbers_and_memory_starts_at_zero(figures):
    results = json.loads(REPORT.read_text())
    report_figures.make_plots(results)
    left, right = figures[1].axes
    figures[1].canvas.draw()
    labels = [t.get_text() for t in left.get_yticklabels() if t.get_text()]
    assert labels and all("10^" not in t and "times" not in t and "×" not in t for t in labels)
    assert right.get_ylim()[0] == 0


def _texts(blocks) -> list[str]:
    out = []
    for block in blocks:
        for part in block[1:]:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, list):
                out.append(json.dumps(part))
    return out


def test_the_page_says_each_paired_test_once_shows_matrices_once_and_no_none_budget():
    from longbert.comparison.page import build_blocks

    results = committed("reach_depth_learned")
    assert all(c["n"] == 2000 for c in results["comparisons"])  # every test document is long: two tests per pair
    blocks = build_blocks(results)
    paired = next(b for b in blocks if b[0] == "table" and b[1][0] == "strategies")[2]
    pairs = [row[0] for row in paired]
    assert len(pairs) == len(set(pairs)) == len(results["comparisons"]) // 2
    assert all(row[1] == "all (every one >512 tokens)" for row in paired)
    assert ("img", "confusion_matrices", "confusion matrix per strategy") in blocks
    assert not any(b[0] == "table" and b[1][0] == "true \\ predicted" for b in blocks)  # the plot has the counts
    assert not any("None" in text for text in _texts(blocks))


def test_a_long_only_test_is_kept_where_short_documents_make_it_differ():
    from longbert.comparison.page import build_blocks

    results = committed("compare_hyperpartisan")
    # 366 of its 628 test articles are over 512 tokens
    paired = next(b for b in build_blocks(results) if b[0] == "table" and b[1][0] == "strategies")[2]
    assert {row[1] for row in paired} == {"all", ">512 tokens"}


def test_the_tables_have_no_column_for_a_length_without_test_documents():
    """compare_imdb tests on reviews over 512 tokens only: neither the page's table nor the terminal's has a '≤512'
    column of n/a; Hyperpartisan's test, which has short articles too, keeps it."""
    from rich.console import Console

    from longbert.comparison.page import build_blocks
    from longbert.comparison.render import print_summary

    for name, short in (("compare_imdb", False), ("compare_hyperpartisan", True)):
        results = committed(name)
        headers = next(b for b in build_blocks(results) if b[0] == "table" and b[1][0] == "strategy")[1]
        assert any(h.startswith("≤512 (n=") for h in headers) == short, name
        assert all("(n=0)" not in h for h in headers)
        console = Console(record=True, width=200)
        print_summary(results, console)
        assert ("≤512" in console.export_text()) == short, name


def test_a_bucket_holding_every_test_document_is_not_drawn_twice(figures):
    results = committed("reach_depth_learned")
    report_figures.make_plots(results)  # every one of its 2,000 test documents is over 1,024 tokens
    ax = figures[0].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["all\n(n=2000)"]
    assert "%" in ax.yaxis.get_major_formatter()(0.625, 0) and "62.5" in ax.yaxis.get_major_formatter()(0.625, 0)


def test_the_page_counts_its_strategies_in_words_that_agree():
    from longbert.comparison.page import build_blocks

    one = committed("reach_depth_bigbird105")
    three = committed("reach_depth_learned")
    assert build_blocks(one)[1][1].startswith("1 strategy (bigbird) trained")
    assert build_blocks(three)[1][1].startswith("3 strategies (chunk, bigbird, recurrence) trained")


def test_the_page_counts_the_pseudo_labelled_training_documents_apart():
    """A run with train.self_training_documents trained on its labelled documents and a teacher's pseudo-labelled
    ones: the page's first line says both (imdb_selftrain-n100: 100 labelled, 1,572 pseudo-labelled)."""
    from longbert.comparison.page import build_blocks

    results = committed("imdb_selftrain-n100")
    assert "100 train (and 1,572 pseudo-labelled by a teacher), 2,000 test" in build_blocks(results)[1][1]
    plain = committed("imdb_curve_setfit-n100")
    assert "pseudo-labelled" not in build_blocks(plain)[1][1]
