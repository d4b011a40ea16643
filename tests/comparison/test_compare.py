"""`longbert compare`: end to end with two strategies on a tiny model (files and their fields, reuse, resume,
early errors, the CLI). How overrides reach each strategy is tested in test_plan.py, the verdict in test_verdict.py,
the error-analysis helpers in tests/inference/test_analysis.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from longbert.cli import app
from longbert.comparison.orchestrator import compare
from longbert.errors import LongbertError

pytestmark = pytest.mark.heavy  # trains, resumes or exports models: left out of the 1-minute subset

STRATEGIES = ["truncate", "chunk"]


def tiny_overrides(backbone_dir, data_dir) -> list[str]:
    """The tiny_recipe fixture's settings in compare's override forms: shared keys for every strategy, and each
    strategy's window sized for the tiny backbone's 128 positions."""
    return [
        f"backbone.name={backbone_dir}",
        f"data.path={data_dir}",
        "data.label_names=[neg, pos]",
        "data.validation_fraction=0.25",
        "data.max_document_tokens=400",
        "data.test_longer_than=0",  # the default recipe tests on long reviews only; the slice has few
        "data.max_test_documents=null",
        "train.epochs=1",
        "train.batch_size=8",
        "train.learning_rate=0.001",
        'train.mixed_precision="no"',
        "eval.batch_size=16",
        "eval.target_accuracy=0.9",  # the report's abstention target (0.95 by default)
        "chunk.window=62",  # one strategy only
        "strategy.pooling=attention",  # every strategy with a `pooling` field (chunk, not truncate)
        "train.head_first=false",  # the base recipe's head stage: tested in tests/training/test_head_first.py and
                                   # by the multi-label compare in tests/training/test_train.py; kept short here
        "truncate.max_tokens=62",
        "truncate.head_tokens=16",
    ]


@pytest.fixture(scope="module")
def compared(tiny_backbone_dir, imdb_slice, tmp_path_factory):
    """One compare run (truncate, chunk) into a temporary runs/ and reports/ folder."""
    root = tmp_path_factory.mktemp("compare")
    settings = dict(strategies=STRATEGIES, overrides=tiny_overrides(tiny_backbone_dir, imdb_slice), name="tiny",
                    runs_dir=root / "runs", reports_dir=root / "reports", speed_documents=8, long_tokens=128)
    result = compare(**settings)
    return {"root": root, "settings": settings, "results": result.metrics, "result": result}


def _finished_files(compared) -> dict:
    runs = compared["root"] / "runs" / "tiny"
    return {s: (runs / s / "metrics.json").stat().st_mtime_ns for s in STRATEGIES}


def test_compare_writes_the_report_with_every_field(compared):
    root, results = compared["root"], compared["results"]
    report = root / "reports" / "tiny"
    saved = json.loads((report / "results.json").read_text())
    # What compare returns: the report folder, the numbers results.json holds, and the model to deploy.
    result = compared["result"]
    assert result.folder == report and result.metrics is results and saved["deployable"]
    assert result.model == Path(saved["deployable"]["folder"])
    assert saved["strategy_order"] == STRATEGIES
    assert saved["command"].startswith("longbert compare --strategies truncate,chunk")
    assert saved["machine"]["torch"] == torch.__version__ and saved["machine"]["cpu"]
    for name in STRATEGIES:
        row = saved["strategies"][name]
        assert row["status"] == "trained"
        assert 0 <= row["accuracy"] <= 1 and 0 <= row["macro_f1"] <= 1
        assert set(row["by_length"]) == {"<=512", "513-1024", ">1024"}
        assert sum(b["documents"] for b in row["by_length"].values()) == row["documents"] == 30
        assert row["train_seconds"] > 0 and row["trainable_parameters"] > 0
        assert row["speed"]["documents_per_second"] > 0 and row["speed"]["peak_memory_mb"] > 0
        timed = [b for b in row["speed_by_length"].values() if b["documents"]]
        assert timed and all(b["documents_per_second"] > 0 and b["documents"] <= 8 for b in timed)
        assert len(row["confusion_matrix"]) == 2
        # Each run keeps its own run folder, outside reports/, with a model `predict` can load.
        run_dir = root / "runs" / "tiny" / name
        assert row["run_dir"] == str(run_dir)
        assert (run_dir / "best" / "longbert_config.json").is_file()
        assert (run_dir / "recipe.yaml").read_text().count(f"name: {name}") == 1
    # The same data, seed and budget for both: the resolved recipes differ only in the strategy and the run name.
    a, b = (json.loads(json.dumps(results["strategies"][s]["settings"])) for s in STRATEGIES)
    assert a["name"] == "truncate" and a["max_tokens"] == 62 and "pooling" not in a
    assert b["name"] == "chunk" and b["window"] == 62 and b["pooling"] == "attention"
    assert len(set(saved["budget"]["steps"].values())) == 1
    assert saved["budget"]["seed"] == 42
    assert {c["documents"] for c in saved["comparisons"]} == {"all", "long"}
    # The TF-IDF baseline: a row beside the strategies, paired with each, and a verdict line saying whether each
    # strategy beats it.
    base = saved["baseline"]
    assert base["name"] == "tfidf" and base["settings"]["C"] in base["settings"]["C_grid"]
    assert set(base["validation"]) == {str(c) for c in base["settings"]["C_grid"]}
    assert sum(b["documents"] for b in base["by_length"].values()) == base["documents"] == 30
    pairs = {(c["a"], c["b"], c["documents"]) for c in saved["comparisons"]}
    assert {("truncate", "tfidf", "all"), ("chunk", "tfidf", "long")} <= pairs
    for c in saved["comparisons"]:
        assert c["n"] == (30 if c["documents"] == "all" else saved["data"]["long_documents"])
    assert sum(saved["data"]["class_counts"].values()) == 30
    # The ensemble row: both strategies' test probabilities averaged (the only group of two or more), chosen on the
    # validation predictions each run kept, paired against every other row, and said in the verdict.
    ensemble = saved["ensemble"]
    assert ensemble["members"] == STRATEGIES and ensemble["groups_scored"] == 1
    assert ensemble["chosen_by"] == "validation macro_f1" and 0 <= ensemble["validation"] <= 1
    assert ensemble["documents"] == 30 and 0 <= ensemble["accuracy"] <= 1
    for name in STRATEGIES:
        assert (root / "runs" / "tiny" / name / "predictions-validation.jsonl").is_file()
    assert {("truncate", "ensemble", "all"), ("chunk", "ensemble", "long"), ("ensemble", "tfidf", "all")} <= pairs
    assert "| ensemble (truncate + chunk) |" in (report / "report.md").read_text()
    assert "Ensemble of truncate + chunk" in (report / "report.md").read_text()
    assert "| tfidf (baseline) |" in (report / "report.md").read_text()
    # The hybrid row: the strategy best on validation mixed with TF-IDF over its token ids, its weight chosen on
    # validation; a model folder of its own under that run, paired against every other row, said in the verdict.
    # Its base is the ensemble when the ensemble scores higher on validation than either strategy alone.
    hybrid, singles = saved["hybrid"], saved["deployable"]["validation"]
    best_single = max(STRATEGIES, key=lambda s: (singles[s], -STRATEGIES.index(s)))
    on_ensemble = ensemble["validation"] > singles[best_single]
    base_name = hybrid["members"][0]
    assert hybrid["members"] == [("ensemble" if on_ensemble else best_single), "tfidf"] and 0 <= hybrid["mix"] <= 1
    folder = root / "runs" / "tiny" / ("hybrid" if on_ensemble else f"{base_name}/hybrid")
    assert hybrid["documents"] == 30 and hybrid["folder"] == str(folder) and (folder / "best").is_dir()
    unordered = {(frozenset(p[:2]), p[2]) for p in pairs}
    assert {(frozenset({base_name, "hybrid"}), "all"), (frozenset({"ensemble", "hybrid"}), "all"),
            (frozenset({"hybrid", "tfidf"}), "long")} <= unordered
    assert f"| hybrid ({base_name} + tfidf) |" in (report / "report.md").read_text()
    assert f"Hybrid of {base_name} and TF-IDF" in (report / "report.md").read_text()
    assert "Classical baseline (TF-IDF" in (report / "report.md").read_text()
    assert "Test documents per class: neg" in (report / "report.md").read_text()
    # The model to deploy: the row best on validation (never test), of those a folder holds, and that folder loads.
    chosen = saved["deployable"]
    assert set(chosen["validation"]) == {*STRATEGIES, "ensemble", "hybrid"} and chosen["metric"] == "macro_f1"
    assert chosen["validation"][chosen["row"]] == max(chosen["validation"].values())
    expected = {"ensemble": root / "runs" / "tiny" / "ensemble", "hybrid": Path(hybrid["folder"])}.get(
        chosen["row"], root / "runs" / "tiny" / chosen["row"])
    assert Path(chosen["folder"]) == expected and (expected / "best").is_dir()
    assert f"saved as a model folder that longbert predict loads: {expected}." in (report / "report.md").read_text()
    import longbert

    loaded = longbert.LongDocumentClassifier.from_pretrained(expected)
    assert loaded.predict(["a long review"], precision="fp32")[0]["label"] in ("neg", "pos")
    for example in saved["error_analysis"]["examples"]:  # long_tokens=128: the tiny models disagree on some
        assert example["n_tokens"] > 128 and example["right"] and example["wrong"]
        assert example["strategies"]["truncate"]["decisive"]["method"] == "kept"
        chunk = example["strategies"]["chunk"]
        assert chunk["decisive"]["method"] in ("weight", "occlusion")
        assert any(segment["highlight"] and segment["text"].strip() for segment in chunk["excerpt"])
    # The pages: markdown with plot files beside it, HTML self-contained with the plots embedded.
    markdown = (report / "report.md").read_text()
    for part in ("Verdict", "truncate", "chunk", "Accuracy by document length", "Error analysis",
                 "Machine and command", torch.__version__):
        assert part in markdown
    for png in ("accuracy-by-length.png", "speed-by-length.png", "confusion-matrices.png"):
        assert (report / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png in markdown
    page = (report / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 5  # with the reliability diagrams and the coverage curve
    assert "http://" not in page and "https://" not in page
    assert not list((root / "reports").glob(".*"))  # no staging folder left behind


def test_compare_measures_every_rows_calibration_and_chooses_its_threshold_on_the_runs_validation(compared):
    from longbert.comparison.report_numbers import abstention, read_predictions
    from longbert.ensembles.choice import read_validation

    root = compared["root"]
    report, saved = root / "reports" / "tiny", json.loads((root / "reports" / "tiny" / "results.json").read_text())
    rows = {**saved["strategies"], "ensemble": saved["ensemble"], "hybrid": saved["hybrid"], "tfidf": saved["baseline"]}
    for name, row in rows.items():
        section = row["calibration"]
        assert 0 <= section["ece"] <= 1 and section["nll"] > 0 and len(section["coverage"]) == 20, name
        assert sum(b["count"] for b in section["bins"]) == 30, name
    assert saved["baseline"]["abstention"] is None  # it keeps no validation predictions
    assert saved["target_accuracy"] == 0.9  # eval.target_accuracy, as the recipe set it
    for name in STRATEGIES:  # the threshold from the run folder's validation rows, applied to its test rows
        run = root / "runs" / "tiny" / name
        assert saved["strategies"][name]["abstention"] == abstention(read_validation(run), read_predictions(run), 0.9)
        page = (run / "metrics.md").read_text()  # training's page; 30 test documents draw no diagram
        assert "## Calibration" in page and "No reliability diagram: 30 documents are too few" in page
        assert not (run / "reliability-diagram.png").exists()
    markdown = (report / "report.md").read_text()
    assert "## Can its probabilities be trusted? Calibration on the test split" in markdown
    assert "## Abstention: answer the sure documents, send the rest to a person" in markdown
    for png in ("reliability-diagram.png", "coverage-curve.png"):
        assert (report / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png in markdown


def test_a_report_with_twenty_classes_lists_top_confusions_and_plots_the_matrices(compared, tmp_path):
    """The tiny comparison's results with 20 synthetic classes: no 20-column table; the plot holds the matrices."""
    import copy

    from longbert.comparison.render import write_report

    results = copy.deepcopy(compared["results"])
    labels = [f"topic-{k:02d}" for k in range(20)]
    results["label_names"] = labels
    for k, name in enumerate(STRATEGIES):
        matrix = [[0] * 20 for _ in labels]
        for t in range(20):
            matrix[t][t] = 8
            matrix[t][(t + 1 + k) % 20] = t % 3  # each strategy confuses its own pairs
        results["strategies"][name]["confusion_matrix"] = matrix
    write_report(results, tmp_path / "report")
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert markdown.count("| true | predicted | documents | share |") == 2
    assert "| topic-02 | topic-03 | 2 | 20.0% |" in markdown  # truncate
    assert "| topic-02 | topic-04 | 2 | 20.0% |" in markdown  # chunk
    assert "true \\\\ predicted" not in markdown
    assert max(line.count("|") for line in markdown.splitlines() if "topic-" in line) <= 5
    png = (tmp_path / "report" / "confusion-matrices.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and "confusion-matrices.png" in markdown
    html = (tmp_path / "report" / "report.html").read_text()
    assert html.count("<th>share</th>") == 2


def test_a_report_whose_test_ids_name_groups_shows_accuracy_per_group(compared, tmp_path):
    """The tiny comparison's results with probe-like ids: the report gains a table of accuracy per group (the imdb
    slice's ids are row numbers: no table there)."""
    import copy
    import dataclasses

    from longbert.comparison.render import write_report
    from longbert.comparison.report_numbers import accuracy_by_group
    from longbert.evaluation.predictions import read_prediction_rows

    results = copy.deepcopy(compared["results"])
    assert results["by_group"] is None
    runs = compared["root"] / "runs" / "tiny"
    predictions = {}
    for name in STRATEGIES:
        rows = read_prediction_rows(runs / name / "predictions-test.jsonl")
        predictions[name] = [dataclasses.replace(r, id=f"depth-{'early' if r.index < 10 else 'late'}-{r.index}")
                             for r in rows]
    results["by_group"] = accuracy_by_group(predictions)
    write_report(results, tmp_path / "report")
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "### Accuracy by document group" in markdown
    assert "| row | depth-early (n=10) | depth-late (n=20) |" in markdown
    import re

    for row in STRATEGIES:
        assert re.search(rf"^\| {row} \| \d+\.\d% \| \d+\.\d% \|$", markdown, re.MULTILINE), row


def test_a_second_compare_reuses_finished_runs_and_an_interrupted_one_continues(compared, capsys):
    before = _finished_files(compared)
    baseline_file = compared["root"] / "runs" / "tiny" / "tfidf-baseline.json"
    baseline_written = baseline_file.stat().st_mtime_ns
    again = compare(**compared["settings"]).metrics
    assert {s: again["strategies"][s]["status"] for s in STRATEGIES} == {"truncate": "reused", "chunk": "reused"}
    assert _finished_files(compared) == before
    assert baseline_file.stat().st_mtime_ns == baseline_written  # the baseline is reused too
    assert again["baseline"]["accuracy"] == compared["results"]["baseline"]["accuracy"]
    for s in STRATEGIES:
        assert again["strategies"][s]["accuracy"] == compared["results"]["strategies"][s]["accuracy"]

    # A run that stopped after its last checkpoint but before its test metrics continues; the other is reused.
    (compared["root"] / "runs" / "tiny" / "chunk" / "metrics.json").unlink()
    resumed = compare(**compared["settings"]).metrics
    assert resumed["strategies"]["chunk"]["status"] == "resumed"
    assert resumed["strategies"]["truncate"]["status"] == "reused"
    assert resumed["strategies"]["chunk"]["accuracy"] == compared["results"]["strategies"]["chunk"]["accuracy"]

    # A run killed between the two renames of a checkpoint swap (only the swapped-out folder is left) is put right
    # by training's recovery, not deleted by compare; nothing of the swap is left behind.
    chunk = compared["root"] / "runs" / "tiny" / "chunk"
    (chunk / "metrics.json").unlink()
    (chunk / "checkpoint").rename(chunk / ".checkpoint.old-99999")
    capsys.readouterr()
    recovered = compare(**compared["settings"]).metrics
    assert "restored checkpoint (a swap was interrupted)" in capsys.readouterr().err
    assert recovered["strategies"]["chunk"]["accuracy"] == compared["results"]["strategies"]["chunk"]["accuracy"]
    assert (chunk / "checkpoint" / "state.json").is_file()
    assert not [p.name for p in chunk.iterdir() if p.name.startswith(".")]


def test_a_changed_recipe_fails_before_any_training(compared):
    before = _finished_files(compared)
    settings = dict(compared["settings"], overrides=compared["settings"]["overrides"] + ["train.learning_rate=0.002"])
    with pytest.raises(LongbertError, match="different recipe.*train.learning_rate"):
        compare(**settings)
    assert _finished_files(compared) == before


def test_unknown_strategies_and_bad_settings_fail_before_any_training(tmp_path, tiny_backbone_dir, imdb_slice):
    with pytest.raises(LongbertError, match="unknown strategy 'chnk'; valid strategies: .*chunk.*truncate"):
        compare(["truncate", "chnk"], runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports")
    with pytest.raises(LongbertError, match="none of truncate has a field 'window'"):
        compare("truncate", overrides=["strategy.window=62"], runs_dir=tmp_path / "runs")
    # A window the tiny backbone's 128 positions cannot hold fails when the models are built, before training.
    too_long = [o for o in tiny_overrides(tiny_backbone_dir, imdb_slice) if not o.startswith("chunk.window")]
    with pytest.raises(LongbertError, match="^chunk: strategy.window must leave room"):
        compare(["truncate", "chunk"], overrides=too_long + ["chunk.window=500"], runs_dir=tmp_path / "runs")
    # A strategy weight that frozen mode cannot train (rmt's initial memory) fails before chunk trains.
    frozen = tiny_overrides(tiny_backbone_dir, imdb_slice) + ["model.finetune=frozen", "rmt.segment=40"]
    with pytest.raises(LongbertError, match="^rmt: model.finetune=frozen cannot train strategy.memory"):
        compare(["chunk", "rmt"], overrides=frozen, runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "reports").exists()


def test_cli_compare_prints_the_summary_and_reports_errors_in_one_line(compared, tmp_path):
    root, settings = compared["root"], compared["settings"]
    args = ["compare", "--strategies", "truncate,chunk", "--name", "tiny", "--runs-dir", str(root / "runs"),
            "--reports-dir", str(tmp_path / "reports")]
    for text in settings["overrides"]:
        args += ["--set", text]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "longbert compare: tiny" in result.output and "reused" in result.output
    assert (tmp_path / "reports" / "tiny" / "report.html").is_file()

    result = CliRunner().invoke(app, ["compare", "--strategies", "truncate,chnk", "--runs-dir", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert "valid strategies" in result.output and not (tmp_path / "r").exists()


def test_the_terminal_summary_never_cuts_a_number_when_output_is_not_a_terminal(compared):
    """Redirected output (a log file, CI) is 80 columns or fewer; rich cut numbers to "83.…" to fit. Rendered into a
    narrow console that is not a terminal, every number of the table appears whole."""
    import io

    from rich.console import Console

    from longbert.comparison.formatting import duration, number, percent, shown_buckets
    from longbert.comparison.render import print_summary

    results = compared["results"]
    for width in (30, 60):
        out = io.StringIO()
        print_summary(results, Console(file=out, width=width, force_terminal=False, color_system=None))
        text = out.getvalue()
        assert "…" not in text, text
        for name in STRATEGIES:
            r = results["strategies"][name]
            cells = [percent(r["accuracy"]), f"{r['macro_f1']:.3f}", duration(r["train_seconds"]),
                     number(r["speed"]["documents_per_second"]), number(r["speed"]["peak_memory_mb"], 0),
                     f"{r['trainable_parameters'] / 1e6:.1f}M",
                     *[percent(r["by_length"][b]["accuracy"]) for b in shown_buckets(results)]]
            table = text.split("•")[0]  # the verdict's lines follow the table
            row = next(line for line in table.splitlines() if line.lstrip().startswith(name))
            for cell in cells:
                assert f" {cell}" in row, (cell, row)


def test_a_plan_made_before_another_compare_finished_the_runs_reuses_them(compared, monkeypatch):
    """Two compares of the same name: the second planned "train" while the first was still training, and the first
    has finished since. The run is reused at its turn, not refused with advice (--resume) compare does not take."""
    import longbert.comparison.orchestrator as orchestrator

    before = _finished_files(compared)
    stale = lambda recipes: {strategy: "train" for strategy in recipes}
    monkeypatch.setattr(orchestrator, "plan_runs", stale)
    again = compare(**compared["settings"]).metrics
    assert {s: again["strategies"][s]["status"] for s in STRATEGIES} == {"truncate": "reused", "chunk": "reused"}
    assert _finished_files(compared) == before


def test_a_run_folder_in_use_by_another_compare_is_said_in_compares_words(tmp_path, tiny_backbone_dir, imdb_slice):
    from longbert.utils.destinations import locked

    settings = dict(overrides=tiny_overrides(tiny_backbone_dir, imdb_slice), name="busy", runs_dir=tmp_path / "runs",
                    reports_dir=tmp_path / "reports")
    with locked(tmp_path / "runs" / "busy" / "truncate"):  # what another compare with --name busy holds
        with pytest.raises(LongbertError) as error:
            compare(STRATEGIES, **settings)
    message = str(error.value)
    assert "in use by another longbert process" in message and "--name" in message
    assert "--resume" not in message and "output_dir" not in message
    assert not (tmp_path / "runs" / "busy" / "truncate").exists()


@pytest.mark.parametrize("option", ["--runs-dir", "--reports-dir"])
def test_an_unwritable_runs_or_reports_folder_is_one_line_before_any_training(option, tmp_path, tiny_backbone_dir,
                                                                             imdb_slice):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    args = ["compare", "--strategies", ",".join(STRATEGIES), "--name", "w", "--runs-dir", str(tmp_path / "runs"),
            "--reports-dir", str(tmp_path / "reports"), option, str(blocker / "below")]
    for text in tiny_overrides(tiny_backbone_dir, imdb_slice):
        args += ["--set", text]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and str(blocker / "below") in lines[0], result.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "reports").exists()  # nothing made, the other folder
    # included: both are checked before either is created


def test_a_report_folder_of_other_files_is_refused_before_any_training_and_kept(tmp_path, tiny_backbone_dir,
                                                                                 imdb_slice):
    mine = tmp_path / "reports" / "w"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    args = ["compare", "--strategies", ",".join(STRATEGIES), "--name", "w", "--runs-dir", str(tmp_path / "runs"),
            "--reports-dir", str(tmp_path / "reports")]
    for text in tiny_overrides(tiny_backbone_dir, imdb_slice):
        args += ["--set", text]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "report folder" in lines[0] and str(mine) in lines[0], result.output
    assert (mine / "notes.txt").read_text() == "mine" and not (tmp_path / "runs" / "w" / "truncate").exists()


def test_a_report_rendered_again_from_its_results_is_the_report_compare_wrote(compared, tmp_path):
    """`longbert report` reads only results.json: moved elsewhere and rendered again, the pages are the same."""
    import shutil

    from longbert.comparison.render import render_again

    written = compared["root"] / "reports" / "tiny"
    moved = tmp_path / "moved"
    shutil.copytree(written, moved)
    render_again(moved)
    for page in ("report.md", "report.html"):
        assert (moved / page).read_text() == (written / page).read_text(), page
    again = json.loads((moved / "results.json").read_text())
    assert again["report"]["folder"] == str(moved)
    before = json.loads((written / "results.json").read_text())
    assert {k: v for k, v in again.items() if k != "report"} == {k: v for k, v in before.items() if k != "report"}


@pytest.mark.parametrize("bad", ["data.label_names=[a, b]", "data.text_column=nope"])
def test_a_compare_refused_by_its_data_leaves_no_empty_folder(tiny_backbone_dir, imdb_slice, tmp_path, bad):
    overrides = [f"backbone.name={tiny_backbone_dir}", f"data.path={imdb_slice}", "data.label_names=[neg, pos]",
                 "data.max_document_tokens=400", "truncate.max_tokens=62", "truncate.head_tokens=16", bad]
    with pytest.raises(LongbertError, match="label 'neg' is not one of|data.text_column 'nope' not found"):
        compare("truncate", None, overrides, "c", runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports")
    assert list(tmp_path.iterdir()) == [], "the run folder and the folders made for it are removed"
