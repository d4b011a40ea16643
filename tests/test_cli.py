"""The CLI through typer's CliRunner: the happy path, and every user error as one line with a non-zero exit."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from helpers import assert_user_error
from longbert.cli import app
from longbert.result import Result
from longbert.utils.folders import RUN_ENTRIES

runner = CliRunner()


def run(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def sets(overrides):
    return [x for o in overrides for x in ("--set", o)]


def test_strategies_lists_the_registry():
    result = run("strategies")
    assert result.exit_code == 0
    for name in ("truncate", "chunk", "sliding"):
        assert f"\n{name} " in "\n" + result.output
    assert "stride (default 255)" in result.output
    exportable = {line.split()[0] for line in result.output.splitlines() if line.endswith("[exportable]")}
    assert exportable == {"truncate", "chunk", "sliding"}  # the window strategies: an export graph runs per window


def test_train_predict_evaluate(tiny_recipe, tmp_path):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text("# a tiny run\nname: tiny\n")
    result = run("train", recipe, *sets(tiny_recipe + ["train.max_steps=2"]))
    assert result.exit_code == 0, result.output
    assert "test accuracy" in result.output
    run_dir = tmp_path / "run"
    # The run's own picture: its curves as a PNG, linked from metrics.md.
    assert (run_dir / "training-curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](training-curves.png)" in (run_dir / "metrics.md").read_text()
    from fnmatch import fnmatch


    unknown = [p.name for p in run_dir.iterdir() if not any(fnmatch(p.name, e) for e in RUN_ENTRIES)]
    assert unknown == [], "a run's own files must be known to it, or running it again is refused as foreign"

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

    # --set changes the run's data and eval settings before its data loads; only the asked split is tokenized.
    import longbert.data.documents

    tokenized = []
    tokenize = longbert.data.documents.tokenize_documents

    def counting(tokenizer, texts, cap):
        tokenized.append(len(texts))
        return tokenize(tokenizer, texts, cap)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(longbert.data.documents, "tokenize_documents", counting)
        result = run("evaluate", run_dir, "--split", "test", "--set", "data.max_eval_documents=5",
                     "--set", "eval.batch_size=2")
    assert result.exit_code == 0, result.output
    assert "(5 documents)" in result.output
    assert tokenized == [5], "only the 5 test documents were tokenized"
    # Other documents than the run's: written beside the run's own files, which later commands read, not over them.
    assert f"details in {run_dir}/metrics-test-with-overrides.md (other documents than the run's" in result.output
    assert json.loads((run_dir / "metrics-test-with-overrides.json").read_text())["documents"] == 5
    assert len((run_dir / "predictions-test-with-overrides.jsonl").read_text().splitlines()) == 5
    assert len((run_dir / "predictions-test.jsonl").read_text().splitlines()) == 30, "training's, all 30 documents"
    assert not (run_dir / "metrics-test.json").exists()
    assert "(with data.max_eval_documents=5, eval.batch_size=2)" in (run_dir / "metrics-test-with-overrides.md"
                                                                       ).read_text()
    assert "confusion-matrix" not in " ".join(p.name for p in run_dir.iterdir()), "2 classes: no plot"
    validation = (run_dir / "predictions-validation.jsonl").read_text()
    result = run("evaluate", run_dir, "--split", "validation", "--set", "data.max_eval_documents=5")
    assert result.exit_code == 0, result.output
    assert (run_dir / "predictions-validation.jsonl").read_text() == validation
    result = run("hybrid", run_dir)  # reads the run's own validation and test predictions: still whole
    assert result.exit_code == 0, result.output
    assert_user_error(run("evaluate", run_dir, "--set", "train.epochs=3"),
                      "override 'train.epochs=3'", "only the data and eval sections")
    assert_user_error(run("evaluate", run_dir, "--set", "data.max_eval_documents=0"),
                      "data.max_eval_documents must be >= 1")

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
    ([{"text": "   ", "label": "neg"}], [], ["train.jsonl:1: the document is empty or whitespace-only"]),
    ([{"text": 7, "label": "neg"}], [], ["train.jsonl:1: text is a number (int), not a string"]),
    ([{"text": "a fine film", "label": "neg"}], [], ["all 8 documents of split 'train' have label 'neg'"]),
    ("{\"text\": \"ok\", \"label\": \"neg\"}\n{oops\n", [], ["train.jsonl:2 is not valid JSON"]),
    ("", [], ["train.jsonl is empty"]),
    (b"\xff\n", [], ["train.jsonl:1 is not UTF-8 text (byte 0 is 0xff)"]),
    ([{"text": "x", "label": "neg"}], ["name=../up"], ["name '../up' must be a plain folder name"]),
])
def test_data_errors_leave_nothing_behind(rows, extra, fragments, tiny_recipe, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    if isinstance(rows, list):
        (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows * 8))
        (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows * 2))
    elif rows is not None:  # the train file as it is
        (data / "train.jsonl").write_bytes(rows if isinstance(rows, bytes) else rows.encode())
        (data / "test.jsonl").write_text(json.dumps({"text": "ok", "label": "neg"}) + "\n")
    overrides = [o for o in tiny_recipe if not o.startswith("data.path")] + [f"data.path={data}", *extra]
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\n")
    assert_user_error(run("train", recipe, *sets(overrides)), *fragments)
    assert not (tmp_path / "run").exists(), "no half-written run folder"


@pytest.mark.parametrize("command", ["train", "compare"])
def test_a_pipe_as_data_path_is_one_line(command, tiny_recipe, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # compare writes reports/<name> and runs/compare/<name> here
    pipe = tmp_path / "reviews.jsonl"
    os.mkfifo(pipe)  # nothing writes to it: reading it would wait for ever
    named_by_compare = ("data.path", "strategy.name", "output_dir") if command == "compare" else ("data.path",)
    overrides = [o for o in tiny_recipe if not o.startswith(named_by_compare)] + [f"data.path={pipe}"]
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\n")
    args = ["train", recipe] if command == "train" else ["compare", "--recipe", recipe, "--strategies", "chunk",
                                                         "--name", "cmp"]
    assert_user_error(run(*args, *sets(overrides)), f"data.path '{pipe}' is neither a file nor a folder")
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["r.yaml", "reviews.jsonl"], "nothing written"


def test_model_folder_that_is_not_a_model(tmp_path):
    texts = tmp_path / "t.txt"
    texts.write_text("hello\n")
    assert_user_error(run("predict", tmp_path, texts), "is not a longbert model folder")
    assert_user_error(run("evaluate", tmp_path), "is not a longbert run folder")


def test_predict_input_errors(tmp_path, tiny_backbone_dir):
    assert_user_error(run("predict", tmp_path, tmp_path / "missing.txt"), "input file not found")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no"}\n')
    assert_user_error(run("predict", tmp_path, bad), "bad.jsonl row 2: the text (column 'text') is empty, "
                                                     "whitespace-only or missing")
    assert_user_error(run("predict", tmp_path, "-", input="\n  \n"), "stdin holds no texts")


@pytest.fixture(scope="module")
def model_dir(tiny_backbone_dir, tmp_path_factory):
    """A saved tiny model (no training) whose token cap is 20."""
    from helpers import build_model

    folder = tmp_path_factory.mktemp("cli-model") / "saved"
    build_model(tiny_backbone_dir, "chunk", ["data.max_document_tokens=20"]).save_pretrained(folder)
    return folder


def assert_usage_error(result, option):
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("value", ["-1", "0"])
def test_numeric_options_are_checked(model_dir, tmp_path, value):
    """One line, as every user error (once typer's three-line usage box)."""
    texts = tmp_path / "t.txt"
    texts.write_text("hello\n")
    out = tmp_path / "out.jsonl"
    result = run("predict", model_dir, texts, "--batch-size", value, "-o", out)
    assert result.exit_code == 2 and result.output == f"error: --batch-size must be >= 1, got {value}\n"
    assert not out.exists()
    result = run("evaluate", tmp_path, "--batch-size", value)  # (not a run folder: that line comes first)
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1 and result.output.startswith("error: ")


@pytest.mark.parametrize("command, option, value", [
    ("compare", "--seeds", 99999999999), ("compare", "--seeds", 101),
    ("predict", "--batch-size", 4097), ("evaluate", "--batch-size", 10**12), ("quantize", "--batch-size", 5000),
    ("export", "--parity-documents", 10_001),
    ("serve", "--max-batch", 4097), ("serve", "--max-request-bytes", 2**40), ("serve", "--max-request-texts", 10**6),
    ("serve", "--max-request-tokens", 10**9),
])
def test_a_count_above_what_can_be_planned_is_one_line_before_any_work(tmp_path, command, option, value):
    from longbert.config.limits import COUNT_CEILINGS

    texts = tmp_path / "t.txt"
    texts.write_text("hello\n")
    # Every other argument is wrong too (no model, no recipe): the ceiling is checked first, so it is what is said.
    args = {"compare": ["--strategies", "truncate", "--recipe", tmp_path / "missing.yaml",
                        "--runs-dir", tmp_path / "runs", "--reports-dir", tmp_path / "reports"],
            "predict": [tmp_path, texts, "-o", tmp_path / "out.jsonl"], "serve": [tmp_path, "--port", "0"]}
    before = sorted(tmp_path.iterdir())
    ceiling, why = COUNT_CEILINGS[option]
    assert_user_error(run(command, *args.get(command, [tmp_path]), option, value),
                      f"error: {option} must be at most {ceiling:,} ({why}), got {value:,}")
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("command", ["strategies", "evaluate", "compare"])
def test_a_full_stdout_is_one_line_naming_stdout(capsys, monkeypatch, tmp_path, command):
    import typer

    import longbert.cli as cli
    import longbert.comparison.orchestrator
    import longbert.comparison.render
    import longbert.evaluation.evaluate
    import longbert.evaluation.metrics

    def print_summary(results):
        from rich.console import Console

        Console().print("a table of results")  # as the real summary prints: rich, to whatever sys.stdout is

    # The commands' work is replaced by what they print; printing is what is tested.
    monkeypatch.setattr(longbert.evaluation.evaluate, "evaluate", lambda *args, **kwargs: {})
    monkeypatch.setattr(longbert.evaluation.metrics, "headline", lambda metrics: "accuracy 50.0%")
    monkeypatch.setattr(longbert.comparison.orchestrator, "compare", lambda *args, **kwargs: Result(tmp_path, {}))
    monkeypatch.setattr(longbert.comparison.render, "print_summary", print_summary)
    calls = {"strategies": lambda: cli.strategies(),
             "evaluate": lambda: cli.evaluate(tmp_path, "test", None, [], "auto"),
             "compare": lambda: cli.compare("truncate", None, [], None, tmp_path, tmp_path, 1, None)}
    # sys.stdout on a full disk, set in the test itself: capsys sets its own when the test starts
    with open("/dev/full", "w", encoding="utf-8") as full, pytest.raises(typer.Exit) as exited:
        monkeypatch.setattr("sys.stdout", full)
        calls[command]()
    assert exited.value.exit_code == 2
    assert capsys.readouterr().err == "error: could not write stdout: the disk is full\n"


def test_predict_into_a_missing_folder_fails_before_the_model_loads(tmp_path):
    texts = tmp_path / "t.txt"
    texts.write_text("hello\n")
    # tmp_path is no model folder: the output is checked first, so that is not what the error says
    assert_user_error(run("predict", tmp_path, texts, "-o", tmp_path / "no" / "out.jsonl"),
                      "--output", "/no/out.jsonl: the folder", "does not exist")
    assert not (tmp_path / "no").exists()


def test_predict_counts_lines_and_reports_the_cut(model_dir, tmp_path):
    result = run("predict", model_dir, "-", input="one\u2028still one\ntwo\fstill two\r\n" + "word " * 50 + "\n")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 3, "3 lines in, 3 predictions out"
    assert result.stderr.strip() == "1 of 3 documents were cut at max_document_tokens=20"
    out = tmp_path / "out.jsonl"
    result = run("predict", model_dir, "-", "-o", out, input="short\n")
    assert result.exit_code == 0 and result.stderr == "" and len(out.read_text().splitlines()) == 1


@pytest.mark.parametrize("name, content, options, fragments", [
    ("e.jsonl", b"", [], ["e.jsonl is empty"]),
    ("e.txt", b"", [], ["e.txt holds no texts"]),
    ("e.jsonl", b'{"text": "ok"}\n{"text": oops}\n{"text": "ok"}\n', [], ["e.jsonl:2 is not valid JSON"]),
    ("e.jsonl", b'{"text": "caf\xe9"}\n', [], ["e.jsonl:1 is not UTF-8 text (byte 13 is 0xe9)"]),
    ("e.jsonl", b'{"body": "ok", "stars": 3}\n', ["--text-column", "review"],
     ["--text-column review:", "e.jsonl has no column 'review'; its columns: 'body', 'stars'"]),
    ("e.jsonl", b'{"text": "ok"}\n', ["--id-column", "doc"],
     ["--id-column doc:", "has no column 'doc'; its columns: 'text'"]),
    ("e.csv", b"body,stars\nA review.,3\n", [], ["e.csv has no column 'text'; its columns: 'body', 'stars'"]),
    ("e.csv", b"A review, once read as a line.\nAnother one.\n", [],
     ["e.csv has no column 'text'", "a .csv file is a table whose first line names the columns; for one text per "
                                    "line, name it .txt"]),
    ("e.jsonl.gz", b"not gzip at all", [], ["e.jsonl.gz cannot be read: Not a gzipped file"]),
], ids=["empty-jsonl", "empty-txt", "bad-json-line", "latin-1", "missing-column", "missing-id-column",
        "csv-without-the-column", "csv-of-lines", "damaged-gzip"])
def test_predict_input_is_named(model_dir, tmp_path, name, content, options, fragments):
    (tmp_path / name).write_bytes(content)
    assert_user_error(run("predict", model_dir, tmp_path / name, "-o", tmp_path / "out.jsonl", *options), *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "nothing written"


def test_predict_a_table_with_ids_kept_columns_and_a_precision(model_dir, tmp_path):
    rows = [{"review": "A fine film.", "key": "a", "year": 1999}, {"review": "Awful. " * 40, "key": "b", "year": 2001}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run("predict", model_dir, tmp_path / "in.jsonl", "--text-column", "review", "--id-column", "key",
                 "--keep", "year", "--precision", "fp32")
    assert result.exit_code == 0, result.output
    written = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["id"], r["year"], r["n_tokens"] > 40) for r in written] == [("a", 1999, False), ("b", 2001, True)]
    assert_user_error(run("predict", model_dir, tmp_path / "in.jsonl", "--precision", "fp16"),
                      "--precision must be one of auto, fp32, bf16, int8, got 'fp16'")


@pytest.mark.parametrize("text, fragments", [
    ("", ["r.yaml is empty"]),
    ("train:\n  epochs: 1\n  epochs: 2\n",
     ["line 3, column 3: key 'epochs' appears twice in one mapping (first at line 2)"]),
    ("name: ../escape\n", ["name '../escape' must be a plain folder name"]),
], ids=["empty", "duplicate-key", "path-as-name"])
def test_bad_recipe_files_start_nothing(tmp_path, monkeypatch, text, fragments):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.yaml").write_text(text)
    assert_user_error(run("train", "r.yaml"), *fragments)
    assert list(tmp_path.iterdir()) == [tmp_path / "r.yaml"], "no run folder"


def test_an_override_that_is_not_yaml(tmp_path):
    (tmp_path / "r.yaml").write_text("name: r\n")
    assert_user_error(run("train", tmp_path / "r.yaml", "--set", "train.epochs=[1,"),
                      "override 'train.epochs=[1,': the value is not valid YAML")


def test_a_bare_recipe_name_is_looked_up_in_the_package(tmp_path, monkeypatch):
    import longbert.config.lookup

    monkeypatch.chdir(tmp_path)
    packaged = tmp_path / "packaged"
    packaged.mkdir()
    (packaged / "quick.yaml").write_text("train:\n  epochs: 0\n")
    monkeypatch.setattr(longbert.config.lookup, "PACKAGED_RECIPES", packaged)
    assert_user_error(run("train", "quick"), f"{packaged / 'quick.yaml'}: train.epochs must be >= 1, got 0")
    assert_user_error(run("train", "quik"), "recipe file not found: quik; packaged recipes (usable by name): quick")


def test_version():
    from longbert import __version__

    result = run("--version")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"longbert {__version__}"


def test_train_takes_every_setting_from_set_without_a_recipe_file(monkeypatch, tmp_path):
    import longbert.training.trainer
    from helpers import run_record
    from longbert.training.run_record import TrainResult

    seen = {}

    def fake_train(recipe, resume=False, command=None):
        seen["recipe"] = recipe
        return TrainResult.from_run(tmp_path / "run", run_record())

    monkeypatch.setattr(longbert.training.trainer, "train", fake_train)
    result = run("train", "--set", "data.path=imdb", "--set", "strategy.name=sliding", "--set", "train.epochs=3")
    assert result.exit_code == 0, result.output
    recipe = seen["recipe"]
    assert (recipe.data.path, type(recipe.strategy).__name__.lower().startswith("sliding"), recipe.train.epochs) == (
        "imdb", True, 3)
    assert f"run folder: {tmp_path / 'run'}" in result.output

    seen.clear()
    assert_user_error(run("train"), "train needs a recipe file", "--set key.path=value")
    assert_user_error(run("train", "--set", "train.lr=1"), "unknown recipe key 'train.lr'")
    assert not seen, "nothing trained"


@pytest.mark.parametrize("where, resume, fragments", [
    ("/proc/x", False, ["cannot write into output_dir /proc/x: "]),
    ("a-file", False, ["output_dir ", "a-file exists and is not a folder"]),
    ("a-file", True, ["output_dir ", "a-file exists and is not a folder"]),
    ("a-file/below", False, ["cannot write into output_dir ", "a-file/below: "]),
], ids=["proc", "a-file", "a-file-resumed", "below-a-file"])
def test_an_output_dir_that_cannot_be_a_folder_is_one_line_before_any_work(tiny_recipe, tmp_path, monkeypatch, where,
                                                                          resume, fragments):
    import longbert.training.trainer

    def no_work(*args, **kwargs):
        raise AssertionError("the run started")

    monkeypatch.setattr(longbert.training.trainer, "load_inputs", no_work)
    (tmp_path / "a-file").write_text("not a folder\n")
    output_dir = where if where.startswith("/") else str(tmp_path / where)
    overrides = [o for o in tiny_recipe if not o.startswith("output_dir=")] + [f"output_dir={output_dir}"]
    assert_user_error(run("train", *sets(overrides), *(["--resume"] if resume else [])), *fragments)
    assert (tmp_path / "a-file").read_text() == "not a folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_serve_takes_the_request_limits_from_the_command_line(monkeypatch, tmp_path):
    import longbert.inference.serve
    from longbert.inference.serve_api import Limits

    seen = []
    monkeypatch.setattr(longbert.inference.serve, "serve", lambda *args, **kwargs: seen.append((args, kwargs)))
    result = run("serve", tmp_path, "--port", "0", "--max-request-bytes", "1000", "--max-request-texts", "3",
                 "--max-request-tokens", "500")
    assert result.exit_code == 0, result.output
    (args, kwargs), = seen
    assert args[:3] == (tmp_path, "127.0.0.1", 0)
    assert (kwargs["max_request_bytes"], kwargs["max_request_texts"], kwargs["max_request_tokens"]) == (1000, 3, 500)

    seen.clear()
    assert run("serve", tmp_path).exit_code == 0
    (_, kwargs), = seen
    defaults = Limits()
    assert (kwargs["max_request_bytes"], kwargs["max_request_texts"], kwargs["max_request_tokens"]) == (
        defaults.body_bytes, defaults.texts, defaults.tokens)
    assert "--max-request-tokens" in run("serve", "--help").output


@pytest.mark.parametrize("option", ["--max-request-bytes", "--max-request-texts", "--max-request-tokens"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_request_limit_below_one_is_one_line_before_the_server_starts(tmp_path, option, value):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    # tmp_path is no model folder: the limits are checked first, so that is not what the error says
    assert_user_error(run("serve", tmp_path, "--port", "0", option, value), f"{option} must be >= 1, got {value}")


def test_help_shows_the_exportable_mark_as_text_not_markup():
    output = " ".join(CliRunner().invoke(app, ["strategies", "--help"]).output.split())
    assert "takes those marked [exportable]" in output, output
    assert "\\[" not in CliRunner().invoke(app, ["--help"]).output  # no escape meant for rich shows through


def test_every_help_names_only_files_and_recipes_that_exist():
    """Every command's --help: each repository path it names (recipes/, examples/, docs/, benchmarks/) exists
    (compare --help once gave its default as recipes/compare_imdb.yaml). Recipe fields that help names are checked
    with every other string of longbert's in tests/config/test_field_names_in_messages.py."""
    import re
    from pathlib import Path

    import typer.main

    root = Path(__file__).resolve().parents[1]
    commands = sorted(typer.main.get_command(app).commands)
    assert {"train", "compare", "predict"} <= set(commands)
    named = []
    for command in [None, *commands]:
        result = CliRunner().invoke(app, ([command] if command else []) + ["--help"], env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.replace("│", " ").split())
        for path in re.findall(r"(?<![\w/.-])((?:recipes|examples|docs|benchmarks)/[\w./-]*\w)", text):
            named.append(path)
            assert (root / path).exists(), f"longbert {command or ''} --help names {path}, which does not exist"
    assert "recipes/compare/imdb.yaml" in named  # the scan reads what help shows


def test_help_reads_as_click_help_flags_without_a_value_and_options_with_a_kind_of_value():
    output = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "120"}).output
    lines = {line.split()[0]: line for line in output.splitlines() if line.strip().startswith("--")}
    assert lines["--resume"].split()[:1] == ["--resume"] and "<bool>" not in output and "bool" not in lines["--help"]
    assert lines["--set"].split()[:2] == ["--set", "TEXT"] and "list[str]" not in output
    assert "Usage: root train [OPTIONS] [RECIPE]" in output
    predict = CliRunner().invoke(app, ["predict", "--help"], env={"COLUMNS": "120"}).output
    assert "-o, --output PATH" in predict and "--batch-size INTEGER" in predict


def test_shell_completion_is_offered_and_completes_command_names():
    import os
    import subprocess
    import sys

    assert "--install-completion" in CliRunner().invoke(app, ["--help"]).output
    env = {**os.environ, "_LONGBERT_COMPLETE": "complete_bash", "COMP_WORDS": "longbert comp", "COMP_CWORD": "1"}
    done = subprocess.run([sys.executable, "-c", "from longbert.cli import app; app(prog_name='longbert')"], env=env,
                          capture_output=True, text=True)
    assert done.stdout.split() == ["compare"], (done.stdout, done.stderr)


@pytest.mark.parametrize("command", ["compare", "train"])
def test_a_misspelt_strategy_section_is_one_line_and_nothing_is_written(tmp_path, command):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("data: {path: imdb}\nstrategy: {name: chunk}\nsliding: {poolng: attention}\n")
    args = (["compare", "--recipe", recipe, "--strategies", "chunk", "--runs-dir", tmp_path / "runs",
             "--reports-dir", tmp_path / "reports"] if command == "compare"
            else ["train", recipe, "--set", f"output_dir={tmp_path / 'runs'}"])
    assert_user_error(run(*args), "section 'sliding' has no field 'poolng'", "pooling")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"]


def test_report_renders_an_earlier_report_again_and_refuses_what_is_not_one(tmp_path):
    """A committed report of an earlier version renders again with its numbers; a folder that is not a report, a
    results.json that is not JSON or lacks what the pages show: one line each, exit 2, the folder untouched."""
    import shutil
    from pathlib import Path

    committed = Path(__file__).resolve().parents[1] / "reports" / "compare_imdb"
    report = tmp_path / "compare_imdb"
    shutil.copytree(committed, report)
    (report / "report.md").write_text("an older page")
    (report / "accuracy-by-length.png").write_bytes(b"an older plot")
    result = run("report", report)
    assert result.exit_code == 0, result.output
    assert f"rendered again: {report}/" in result.output
    before = json.loads((committed / "results.json").read_text())
    after = json.loads((report / "results.json").read_text())
    assert after["strategies"] == before["strategies"] and after["comparisons"] == before["comparisons"]
    assert (report / "accuracy-by-length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (report / "report.md").read_text()
    assert "Holm-adjusted" in page and "(n=0)" not in page  # today's verdict and table, not the older page's

    assert_user_error(run("report", tmp_path / "absent"), "absent is not a folder")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    assert_user_error(run("report", plain), "holds no results.json")
    assert [p.name for p in plain.iterdir()] == ["notes.txt"]

    (plain / "results.json").write_text("{not json")
    assert_user_error(run("report", plain), "results.json cannot be read")
    (plain / "results.json").write_text(json.dumps({"name": "x"}))
    assert_user_error(run("report", plain), "not a compare report's results")

    broken = json.loads((committed / "results.json").read_text())
    for row in broken["strategies"].values():
        del row["accuracy"]
    (report / "results.json").write_text(json.dumps(broken))
    pages = {p.name: p.read_bytes() for p in report.iterdir()}
    assert_user_error(run("report", report), "cannot be rendered: it is not as this version", "KeyError")
    assert {p.name: p.read_bytes() for p in report.iterdir()} == pages
    # edited by hand (once an AttributeError or IndexError traceback): one line, the folder as it was
    for edit in (lambda r: r["strategies"][next(iter(r["strategies"]))].update(by_length=[1, 2]),
                 lambda r: r.update(strategy_order=[])):
        edited = json.loads((committed / "results.json").read_text())
        edit(edited)
        (report / "results.json").write_text(json.dumps(edited))
        pages = {p.name: p.read_bytes() for p in report.iterdir()}
        assert_user_error(run("report", report), "cannot be rendered: it is not as this version")
        assert {p.name: p.read_bytes() for p in report.iterdir()} == pages


@pytest.mark.parametrize("args, fragments", [
    (["train", "--bogus"], ["No such option: --bogus", "(see 'root train --help')"]),
    (["predict", "model", "--min-confidence", "abc"], ["'--min-confidence'", "(see 'root predict --help')"]),
    (["frobnicate"], ["No such command 'frobnicate'", "(see 'root --help')"]),
    (["predict"], ["Missing argument 'MODEL_DIR'"]),
    (["--bogus"], ["No such option: --bogus"]),
])
def test_usage_errors_are_one_line_with_the_prefix_of_every_other_error(args, fragments):
    """click would print a usage line, a hint and "Error: ..." on four lines; longbert's errors are "error: ..."."""
    assert_user_error(run(*args), *fragments)


def test_no_arguments_still_show_the_help():
    result = run()
    assert "Commands:" in result.output and "error:" not in result.output
