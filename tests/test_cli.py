"""The CLI through typer's CliRunner: the happy path, and every user error as one line with a non-zero exit."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from longbert.cli import app

runner = CliRunner()


def run(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def sets(overrides):
    return [x for o in overrides for x in ("--set", o)]


def assert_user_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_strategies_lists_the_registry():
    result = run("strategies")
    assert result.exit_code == 0
    for name in ("truncate", "chunk", "sliding"):
        assert f"\n{name} " in "\n" + result.output
    assert "stride (default 255)" in result.output


def test_train_predict_evaluate(tiny_recipe, tmp_path):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text("# a tiny run\nname: tiny\n")
    result = run("train", recipe, *sets(tiny_recipe + ["train.max_steps=2"]))
    assert result.exit_code == 0, result.output
    assert "test accuracy" in result.output
    run_dir = tmp_path / "run"

    texts = tmp_path / "texts.jsonl"
    texts.write_text(json.dumps({"text": "A fine film."}) + "\n\n" + json.dumps({"text": "Awful. " * 200}) + "\n")
    result = run("predict", run_dir, texts)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert len(rows) == 2 and rows[0]["label"] in ("neg", "pos")
    assert sum(rows[1]["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)

    result = run("predict", run_dir, "-", "--output", tmp_path / "out.jsonl", input="first text\nsecond text\n")
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2

    result = run("evaluate", run_dir, "--split", "validation")
    assert result.exit_code == 0, result.output
    assert (run_dir / "metrics-validation.json").is_file()
    assert_user_error(run("evaluate", run_dir, "--split", "dev"), "split 'dev' is not in this run's data")

    # Continuing a finished run's folder without --resume is refused; nothing is touched.
    before = (run_dir / "metrics.json").read_text()
    assert_user_error(run("train", recipe, *sets(tiny_recipe + ["train.max_steps=2"])), "already holds a run")
    assert (run_dir / "metrics.json").read_text() == before


@pytest.mark.parametrize("override, fragments", [
    ("train.lr=1", ["unknown recipe key 'train.lr'", "valid keys in train: epochs"]),
    ("strategy.name=chnk", ["unknown strategy 'chnk'", "valid strategies:", "chunk", "sliding", "truncate"]),
    ("strategy.window=100", ["strategy.stride must be <= strategy.window, got 255 > 100"]),
])
def test_recipe_errors(override, fragments, tiny_recipe, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("strategy:\n  name: sliding\n")
    overrides = [o for o in tiny_recipe if not o.startswith("strategy.")] + [override]
    assert_user_error(run("train", recipe, *sets(overrides)), *fragments)
    assert not (tmp_path / "run").exists()


def test_missing_recipe_file(tmp_path):
    assert_user_error(run("train", tmp_path / "nope.yaml"), "recipe file not found")


@pytest.mark.parametrize("rows, extra, fragments", [
    (None, ["data.path=/no/such/data.jsonl"], ["data.path '/no/such/data.jsonl' does not exist"]),
    ([{"body": "x", "label": "neg"}], [], ["data.text_column 'text' not found", "columns: body, label"]),
    ([{"text": "x", "label": "neutral"}], [], ["label 'neutral' is not one of label_names ['neg', 'pos']"]),
    ([{"text": "   ", "label": "neg"}], [], ["document 0 of split 'train' is empty or whitespace-only"]),
])
def test_data_errors_leave_nothing_behind(rows, extra, fragments, tiny_recipe, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    if rows is not None:
        (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows * 8))
        (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows * 2))
    overrides = [o for o in tiny_recipe if not o.startswith("data.path")] + [f"data.path={data}", *extra]
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\n")
    assert_user_error(run("train", recipe, *sets(overrides)), *fragments)
    assert not (tmp_path / "run").exists(), "no half-written run folder"


def test_model_folder_that_is_not_a_model(tmp_path):
    texts = tmp_path / "t.txt"
    texts.write_text("hello\n")
    assert_user_error(run("predict", tmp_path, texts), "is not a longbert model folder")
    assert_user_error(run("evaluate", tmp_path), "is not a longbert run folder")


def test_predict_input_errors(tmp_path, tiny_backbone_dir):
    assert_user_error(run("predict", tmp_path, tmp_path / "missing.txt"), "input file not found")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no"}\n')
    assert_user_error(run("predict", tmp_path, bad), "bad.jsonl:2 has no string field 'text'")
    assert_user_error(run("predict", tmp_path, "-", input="\n  \n"), "stdin holds no texts")
