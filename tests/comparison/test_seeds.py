"""`compare --seeds N`: each strategy trained at N seeds on the same documents (data.seed pinned), a row per strategy
of its seeds' averaged probabilities, paired like every row, and the single runs' mean ± sd."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from longbert.cli import app
from longbert.comparison.combined import build_seed_ensembles, spread_of
from longbert.comparison.orchestrator import compare
from longbert.comparison.plan import resolve_recipes, seed_recipes
from longbert.comparison.report_numbers import read_predictions
from longbert.errors import LongbertError
from longbert.evaluation.predictions import PredictionRow

from .test_compare import tiny_overrides


def rows(labels, probabilities, lengths=(100, 600, 700, 200)):
    return [PredictionRow(index=i, n_tokens=n, label=label, probabilities=p, predicted=int(np.argmax(p)))
            for i, (label, p, n) in enumerate(zip(labels, probabilities, lengths))]


def test_seed_rows_average_the_seeds_and_give_their_spread():
    labels = [0, 1, 0, 1]
    test = {"chunk": {42: rows(labels, [[0.9, 0.1], [0.6, 0.4], [0.8, 0.2], [0.3, 0.7]]),  # 3 of 4 right
                      43: rows(labels, [[0.7, 0.3], [0.1, 0.9], [0.2, 0.8], [0.45, 0.55]])}}  # 3 of 4 right
    summaries, test_rows, note = build_seed_ensembles(test, False, ["neg", "pos"], 512)
    assert note is None and len(summaries) == 1
    row = summaries[0]
    assert row["name"] == "chunk × 2 seeds" and row["seeds"] == [42, 43] and row["strategy"] == "chunk"
    got = np.array([r.probabilities for r in test_rows[row["name"]]])
    np.testing.assert_allclose(got, [[0.8, 0.2], [0.35, 0.65], [0.5, 0.5], [0.375, 0.625]])
    assert row["metrics"]["accuracy"] == 1.0  # the tie at document 2 goes to class 0, as argmax does
    assert row["per_seed"]["42"]["accuracy"] == 0.75 and row["per_seed"]["43"]["long_accuracy"] == 0.5
    assert row["spread"]["accuracy"] == {"mean": 0.75, "sd": 0.0, "min": 0.75, "max": 0.75}
    assert row["spread"]["long_accuracy"]["mean"] == 0.5  # seed 42: 1 of 2 long right, seed 43: 1 of 2
    assert build_seed_ensembles(test, True, ["neg", "pos"], 512)[0] == []


def test_spread_is_the_sample_standard_deviation():
    assert spread_of([0.8, 0.9, 1.0])["sd"] == pytest.approx(0.1)
    assert spread_of([0.8, None]) is None


def test_extra_seeds_differ_only_in_their_seed_and_folder(tmp_path):
    base = {"seed": 7, "strategy": {"name": "chunk"}, "data": {"max_train_documents": 10}}
    recipes = resolve_recipes(["truncate", "chunk"], base, "base", ["train.epochs=2"], "x", tmp_path)
    by_seed = seed_recipes(recipes, 3, base, "base", ["train.epochs=2"], "x", tmp_path)
    assert sorted(by_seed["chunk"]) == [7, 8, 9] and by_seed["chunk"][7] is recipes["chunk"]
    extra = by_seed["chunk"][9]
    assert extra.seed == 9 and extra.data.seed == 7 and extra.train.epochs == 2
    assert extra.output_dir == str(tmp_path / "x" / "chunk-seed9") and extra.name == "x-chunk-seed9"
    as_dict, base_dict = extra.to_dict(), recipes["chunk"].to_dict()
    for d in (as_dict, base_dict):
        d.pop("seed"), d.pop("name"), d.pop("output_dir"), d["data"].pop("seed")
    assert as_dict == base_dict
    assert seed_recipes(recipes, 1, base, "base", [], "x", tmp_path) == {s: {7: r} for s, r in recipes.items()}
    with pytest.raises(LongbertError, match="--seeds must be at least 1, got 0"):
        seed_recipes(recipes, 0, base, "base", [], "x", tmp_path)


@pytest.fixture(scope="module")
def seeded(tiny_backbone_dir, imdb_slice, tmp_path_factory):
    """One compare --seeds 2 over truncate and chunk on the same 30 training documents; the tests below read it, and
    compare again into its runs (reused, not trained again)."""
    root = tmp_path_factory.mktemp("seeds")
    overrides = [o for o in tiny_overrides(tiny_backbone_dir, imdb_slice) if not o.startswith("strategy.pooling")]
    settings = dict(strategies=["truncate", "chunk"], overrides=overrides + ["data.max_train_documents=30"],
                    name="tiny", runs_dir=root / "runs", reports_dir=root / "reports", speed_documents=4,
                    long_tokens=128, seeds=2)
    return {"root": root, "settings": settings, "results": compare(**settings).metrics}


@pytest.mark.heavy
def test_compare_with_seeds_trains_each_seed_on_the_same_documents(seeded, capsys):
    root, results = seeded["root"], seeded["results"]
    runs = root / "runs" / "tiny"
    first, second = read_predictions(runs / "truncate"), read_predictions(runs / "truncate-seed43")
    assert [r.id for r in first] == [r.id for r in second]  # the same test documents...
    ids = [[json.loads(line)["index"] for line in (runs / f / "predictions-validation.jsonl").open()]
           for f in ("truncate", "truncate-seed43")]
    assert ids[0] == ids[1]  # ...and validation, which seed 43 alone would carve differently (data.seed is pinned)
    assert json.loads((runs / "truncate-seed43" / "metrics.json").read_text())["data"] == json.loads(
        (runs / "truncate" / "metrics.json").read_text())["data"]
    assert [r.probabilities for r in first] != [r.probabilities for r in second]  # a different model
    row = next(r for r in results["seed_ensembles"] if r["strategy"] == "truncate")
    averaged = np.mean([[r.probabilities for r in first], [r.probabilities for r in second]], axis=0)
    right = np.mean(averaged.argmax(1) == np.array([r.label for r in first]))
    assert row["accuracy"] == pytest.approx(right) and row["seeds"] == [42, 43]
    assert row["spread"]["accuracy"]["mean"] == pytest.approx(
        (results["strategies"]["truncate"]["accuracy"] + np.mean([r.right for r in second])) / 2)
    assert results["budget"]["seeds"] == [42, 43]
    assert any({c["a"], c["b"]} == {"truncate", "truncate × 2 seeds"} for c in results["comparisons"])
    report = (root / "reports" / "tiny" / "report.md").read_text()
    assert "### Across seeds" in report and "truncate × 2 seeds (averaged)" in report and "--seeds 2" in report

    capsys.readouterr()
    again = compare(**{**seeded["settings"], "reports_dir": root / "again"}).metrics  # every seed's run is reused
    assert capsys.readouterr().err.count("reused") == 4
    assert again["seed_ensembles"][0]["accuracy"] == results["seed_ensembles"][0]["accuracy"]


@pytest.mark.heavy
def test_with_seeds_every_seeds_run_is_a_candidate_for_the_ensemble(seeded):
    """compare --seeds 2 over two strategies: the ensemble is chosen among the four runs (groups that mix the two
    strategies), as choose_members chooses from their kept validation predictions, and what compare deploys names
    the runs as compare does."""
    from longbert.ensembles.choice import choose_members, read_validation

    results, runs = seeded["results"], seeded["root"] / "runs" / "tiny"
    names = ["truncate", "chunk", "truncate-seed43", "chunk-seed43"]
    validation = {n: read_validation(runs / n) for n in names}
    members, score, groups = choose_members(validation, "macro_f1", {n: n.split("-")[0] for n in names})
    assert groups == 11 - 2  # every group of two or more but the two of one strategy's seeds
    assert results["ensemble"]["members"] == list(members)
    assert results["ensemble"]["validation"] == pytest.approx(score)
    assert results["deployable"]["validation"]["ensemble"] == pytest.approx(score)


@pytest.mark.heavy
def test_seeds_without_seed_rows_still_name_every_seed(seeded, monkeypatch):
    """Where no seed row can be made (multi-label: averaged probabilities would need thresholds of their own), the
    budget and the page still say which seeds were trained, not the base seed alone."""
    from longbert.comparison import orchestrator

    monkeypatch.setattr(orchestrator, "build_seed_ensembles", lambda *a, **k: ([], {}, "no seed-ensemble rows here"))
    reports = seeded["root"] / "without-seed-rows"
    results = compare(**{**seeded["settings"], "reports_dir": reports}).metrics
    assert results["seed_ensembles"] == [] and results["budget"]["seeds"] == [42, 43]
    assert "seeds 42–43" in (reports / "tiny" / "report.md").read_text()


def test_cli_seeds_below_one_is_one_line_before_anything_is_written(tmp_path):
    result = CliRunner().invoke(app, ["compare", "--strategies", "truncate", "--seeds", "0",
                                      "--runs-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "p")])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --seeds must be at least 1, got 0"
    assert not (tmp_path / "r").exists() and not (tmp_path / "p").exists()
