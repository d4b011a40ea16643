"""`longbert predict` as a library: every input kind gives the same predictions, ids and kept columns are carried,
rows come out in input order though documents run sorted by length, they stream into a temporary file that only a
finished run renames, every bad input is named before the model loads, and the token cap is reported."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys

import pytest

import longbert.inference.predict as predict_module
from helpers import build_model
from longbert.errors import LongbertError
from longbert.inference.predict import check_output, predict_file, read_documents, read_texts
from longbert.modeling.classifier import LongDocumentClassifier

TEXTS = ["A short one.", "word " * 100, "A long one, " * 30, "Middling length, this text is.", "ok"]


@pytest.fixture(scope="module")
def model_dir(tiny_backbone_dir, tmp_path_factory):
    """A saved tiny model whose token cap is 20."""
    folder = tmp_path_factory.mktemp("model") / "saved"
    build_model(tiny_backbone_dir, "chunk", ["data.max_document_tokens=20"]).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model(model_dir):
    return LongDocumentClassifier.from_pretrained(model_dir)


def stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def rows_of(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_same_predictions(rows: list[dict], expected: list[dict]) -> None:
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected):
        assert row["label"] == want["label"] and row["n_tokens"] == want["n_tokens"]
        assert row["probabilities"] == pytest.approx(want["probabilities"], abs=1e-5)


# -- reading ---------------------------------------------------------------------------------------------------------

def test_lines_split_on_newlines_only(tmp_path, monkeypatch):
    data = "one\u2028still one\r\ntwo\fstill two\n\nthree\u0085\x1c\x1d\n".encode()
    (tmp_path / "in.txt").write_bytes(data)
    expected = ["one\u2028still one", "two\fstill two", "three\u0085\x1c\x1d"]
    assert read_texts(str(tmp_path / "in.txt")) == expected
    assert read_documents(str(tmp_path / "in.txt"))["text"] == expected
    stdin(monkeypatch, data)
    assert read_documents("-")["text"] == expected


def test_a_json_line_may_hold_a_raw_line_separator_and_a_byte_order_mark(tmp_path):
    (tmp_path / "in.jsonl").write_bytes('\ufeff{"text": "a\u2028b"}\n{"text": "c\\u2029d"}\r\n'.encode())
    assert read_documents(str(tmp_path / "in.jsonl"))["text"] == ["a\u2028b", "c\u2029d"]


def write_every_kind(folder, rows: list[dict]) -> dict[str, tuple[str, dict]]:
    """The same rows as every input kind predict reads: name -> (source, read_documents' keyword arguments)."""
    from datasets import Dataset, DatasetDict

    lines = "".join(json.dumps(r) + "\n" for r in rows)
    (folder / "in.txt").write_text("".join(r["text"] + "\n" for r in rows))
    (folder / "in.jsonl").write_text(lines)
    with gzip.open(folder / "in.jsonl.gz", "wt") as f:
        f.write(lines)
    (folder / "in.json").write_text(json.dumps(rows))
    table = Dataset.from_list(rows)
    table.to_csv(folder / "in.csv", index=False)
    table.to_parquet(folder / "in.parquet")
    table.save_to_disk(folder / "saved")
    DatasetDict({"train": table.select([0]), "test": table}).save_to_disk(folder / "saved-dict")
    (folder / "splits").mkdir()
    (folder / "splits" / "test.jsonl").write_text(lines)
    (folder / "splits" / "train.jsonl").write_text(json.dumps(rows[0]) + "\n")
    kinds = {name: (str(folder / name), {}) for name in
             ("in.txt", "in.jsonl", "in.jsonl.gz", "in.json", "in.csv", "in.parquet", "saved")}
    kinds["saved-dict"] = (str(folder / "saved-dict"), {"split": "test"})
    kinds["splits"] = (str(folder / "splits"), {"split": "test"})
    return kinds


def test_every_input_kind_gives_the_same_predictions(model_dir, model, tmp_path, monkeypatch):
    import datasets
    from datasets import Dataset, DatasetDict

    rows = [{"text": t, "doc": f"d{i}", "lang": "en"} for i, t in enumerate(TEXTS)]
    expected = model.predict(TEXTS, precision="fp32")
    kinds = write_every_kind(tmp_path, rows)
    # A hub id: what datasets would bring from the hub (unreachable here), a DatasetDict of two splits.
    hub = DatasetDict({"train": Dataset.from_list(rows[:1]), "test": Dataset.from_list(rows)})
    local = datasets.load_dataset

    def load_dataset(name, *args, split=None, **kwargs):
        if name != "someone/reviews":
            return local(name, *args, split=split, **kwargs)
        return hub if split is None else hub[split]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    kinds["hub"] = ("someone/reviews", {"split": "test"})
    for name, (source, options) in kinds.items():
        out = tmp_path / f"{name}.out.jsonl"
        result = predict_file(model_dir, source, out, batch_size=2, precision="fp32", **options)
        written = rows_of(out)
        assert result.documents == len(TEXTS) and [r["id"] for r in written] == list(range(len(TEXTS))), name
        assert_same_predictions(written, expected)
    several = r"someone/reviews' .*holds several splits \(train, test\); name one with --split"
    with pytest.raises(LongbertError, match=several):
        read_documents("someone/reviews")
    with pytest.raises(LongbertError, match=r"saved-dict has no split 'dev'; its splits: train, test"):
        read_documents(str(tmp_path / "saved-dict"), split="dev")
    with pytest.raises(LongbertError, match=r"in.txt is one text per line, with no splits"):
        read_documents(str(tmp_path / "in.txt"), split="test")


def test_ids_and_kept_columns_are_carried_in_input_order(model_dir, model, tmp_path):
    rows = [{"body": t, "doc": f"d{i}", "lang": ["en", "fr"][i % 2], "stars": i} for i, t in enumerate(TEXTS)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    predict_file(model_dir, str(tmp_path / "in.jsonl"), out, batch_size=2, text_column="body", id_column="doc",
                 keep=("lang", "stars"), precision="fp32")
    written = rows_of(out)
    assert [list(r)[:3] for r in written] == [["id", "lang", "stars"]] * len(rows), "id, kept columns, prediction"
    assert [(r["id"], r["lang"], r["stars"]) for r in written] == [(r["doc"], r["lang"], r["stars"]) for r in rows]
    assert_same_predictions(written, model.predict(TEXTS, precision="fp32"))


def test_documents_run_sorted_by_length_and_come_out_in_input_order(model, monkeypatch):
    from accelerate import PartialState
    from datasets import Dataset

    texts = [f"text number {i} " + "word " * ((i * 37) % 50) for i in range(40)]
    seen = []
    original = type(model).__call__

    def spy(self, documents=None, units=None):
        seen.append([len(d) for d in documents])
        return original(self, documents, units)

    monkeypatch.setattr(type(model), "__call__", spy)
    monkeypatch.setattr(predict_module, "BATCHES_PER_BLOCK", 4)  # blocks of 12 documents: 4 blocks, the last short
    dataset = Dataset.from_dict({"text": texts})
    rows = list(predict_module.rows_in_input_order(model, dataset, PartialState(), 3, "fp32"))
    assert [r["id"] for r in rows] == list(range(40))
    for block in range(4):
        lengths = [n for batch in seen[4 * block : 4 * block + 4] for n in batch]
        assert lengths == sorted(lengths, reverse=True), "longest first within a block"
    monkeypatch.undo()
    assert_same_predictions(rows, model.predict(texts, batch_size=1, precision="fp32"))


def test_rows_are_written_as_they_are_done_under_a_temporary_name(model_dir, tmp_path, monkeypatch):
    """Each row is on disk (in the temporary file) before the next is computed; an interrupted run leaves neither
    the output nor the temporary file; a finished one renames it."""
    texts = [("word " * (60 - i)).strip() for i in range(6)]  # longest first: computed in input order
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    out = tmp_path / "out.jsonl"
    temporary = lambda: sorted(tmp_path.glob(".out.jsonl.tmp*"))  # .out.jsonl.tmp-PID-XXXX: one name per writer
    on_disk = []
    original = LongDocumentClassifier.predictions_as_done

    def watched(self, texts, batch_size=16, precision="auto", min_confidence=None):
        for n, item in enumerate(original(self, texts, batch_size, precision, min_confidence)):
            (tmp,) = temporary()
            on_disk.append(len(tmp.read_text().splitlines()))
            assert not out.exists()
            if n == stop_at:
                raise KeyboardInterrupt
            yield item

    monkeypatch.setattr(LongDocumentClassifier, "predictions_as_done", watched)
    stop_at = 3
    with pytest.raises(KeyboardInterrupt):
        predict_file(model_dir, str(tmp_path / "in.txt"), out, batch_size=1)
    assert on_disk == [0, 1, 2, 3], "every earlier row was flushed to the temporary file"
    assert not out.exists() and not temporary()
    on_disk.clear()
    stop_at = None
    predict_file(model_dir, str(tmp_path / "in.txt"), out, batch_size=1)
    assert on_disk == [0, 1, 2, 3, 4, 5] and len(rows_of(out)) == 6 and not temporary()


def test_stdout_streams_too(model_dir, tmp_path, monkeypatch):
    texts = [("word " * (30 - i)).strip() for i in range(4)]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    stdout = io.StringIO()
    monkeypatch.setattr("sys.stdout", stdout)
    printed = []
    original = LongDocumentClassifier.predictions_as_done

    def watched(self, texts, batch_size=16, precision="auto", min_confidence=None):
        for item in original(self, texts, batch_size, precision, min_confidence):
            printed.append(len(stdout.getvalue().splitlines()))
            yield item

    monkeypatch.setattr(LongDocumentClassifier, "predictions_as_done", watched)
    predict_file(model_dir, str(tmp_path / "in.txt"), batch_size=1)
    assert printed == [0, 1, 2, 3] and len(stdout.getvalue().splitlines()) == 4


def test_a_full_stdout_is_one_line_naming_stdout(model_dir, tmp_path):
    (tmp_path / "in.txt").write_text("one text\nanother\n")
    with open("/dev/full", "w") as full:
        command = [sys.executable, "-m", "longbert.cli", "predict", str(model_dir), str(tmp_path / "in.txt")]
        done = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              env={**os.environ, "LONGBERT_PROGRESS": "0", "HF_HUB_OFFLINE": "1"})
    assert (done.returncode, done.stderr) == (2, "error: could not write stdout: the disk is full\n")


def test_precision_is_a_parameter(model):
    fp32, bf16 = model.predict(TEXTS, precision="fp32"), model.predict(TEXTS, precision="bf16")
    assert_same_predictions(model.predict(TEXTS, batch_size=1, precision="fp32"), fp32)
    for a, b in zip(fp32, bf16):
        assert a["probabilities"] != b["probabilities"], "bf16 rounds differently"
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=0.05)
    with pytest.raises(LongbertError, match="precision must be one of auto, fp32, bf16, int8, got 'fp16'"):
        model.predict(TEXTS, precision="fp16")


# -- bad input -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, content, options, message", [
    ("in.jsonl", b"", {}, r"input: .*in.jsonl is empty"),
    ("in.jsonl", b'{"text": "ok"}\n{"text": "cut off\n{"text": "ok"}\n', {},
     r"in.jsonl:2 is not valid JSON \(Unterminated string starting at, column 10\)"),
    ("in.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n', {}, r"in.jsonl:2 is not UTF-8 text \(byte 28 is 0xe9\)"),
    ("in.txt", b"fine\nalso fine\ncaf\xe9\n", {}, r"in.txt:3 is not UTF-8 text \(byte 18 is 0xe9\)"),
    ("in.jsonl", b'{"text": "ok"}\n{"text": 5}\n', {},
     r"in.jsonl row 2: the text \(column 'text'\) is not a string \(int 5\)"),
    ("in.jsonl", b'{"text": "ok"}\n{"txt": "no"}\n', {},
     r"in.jsonl row 2: the text \(column 'text'\) is empty, whitespace-only or missing"),
    ("in.jsonl", b'{"text": " "}\n', {},
     r"in.jsonl row 1: the text \(column 'text'\) is empty, whitespace-only or missing"),
    ("in.txt", b"\n \n\t\n", {}, r"in.txt holds no texts"),
    ("in.jsonl", b'{"body": "ok", "n": 1}\n', {},
     r"--text-column text: .*in.jsonl has no column 'text'; its columns: 'body', 'n'$"),
    ("in.jsonl", b'{"text": "ok"}\n', {"id_column": "doc"},
     r"--id-column doc: .*in.jsonl has no column 'doc'; its columns: 'text'"),
    ("in.jsonl", b'{"text": "ok"}\n', {"keep": ("lang",)},
     r"--keep lang: .*in.jsonl has no column 'lang'; its columns: 'text'"),
    ("in.jsonl", b'{"text": "ok", "label": "pos"}\n', {"keep": ("label",)},
     r"--keep label: every output row has its own 'label' field"),
    ("in.csv", b"body,stars\nA review.,3\n", {},
     r"in.csv has no column 'text'; its columns: 'body', 'stars' \(a .csv file is a table whose first line"),
    ("in.csv", b"A review, once read as a line.\nAnother one.\n", {},
     r"in.csv has no column 'text'; its columns: 'A review', ' once read as a line.' \(a .csv file is a table whose "
     r"first line names the columns; for one text per line, name it .txt\)"),
    ("in.csv", b"text\n", {}, r"in.csv has a header line but no rows"),
    ("in.jsonl.gz", b"not gzip at all", {}, r"input: .*in.jsonl.gz cannot be read: Not a gzipped file"),
    ("in.txt", b"a text\n", {"id_column": "doc"},
     r"--id-column doc: .*in.txt has no column 'doc'; its columns: 'text'$"),
], ids=["empty-jsonl", "bad-json-line", "latin-1-jsonl", "latin-1-txt", "number-text", "missing-text", "blank-text",
        "blank-txt", "no-text-column", "no-id-column", "no-kept-column", "kept-column-clashes",
        "csv-without-the-column", "csv-of-lines", "csv-header-only", "damaged-gzip", "txt-has-one-column"])
def test_bad_input_is_named(tmp_path, name, content, options, message):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(LongbertError, match=message):
        read_documents(str(tmp_path / name), **options)


def test_a_missing_input_a_folder_and_an_unreachable_hub_id(tmp_path):
    with pytest.raises(LongbertError, match="input file not found: .*missing.txt"):
        read_documents(str(tmp_path / "missing.txt"))
    without = "is a folder without csv, tsv, jsonl, json.* files and not a save_to_disk folder"
    with pytest.raises(LongbertError, match=without):
        read_documents(str(tmp_path))
    neither = "input 'nobody/nothing' is neither a local file or folder nor a reachable hub dataset"
    with pytest.raises(LongbertError, match=neither):
        read_documents("nobody/nothing")


def test_bad_stdin_is_named(monkeypatch):
    stdin(monkeypatch, b"fine\n\xff\n")
    with pytest.raises(LongbertError, match=r"stdin:2 is not UTF-8 text \(byte 5 is 0xff\)"):
        read_documents("-")


def test_the_output_path_is_checked(tmp_path):
    check_output(None)
    check_output(tmp_path / "out.jsonl")
    with pytest.raises(LongbertError, match=r"--output .*/missing/out.jsonl: the folder .*/missing does not exist"):
        check_output(tmp_path / "missing" / "out.jsonl")
    with pytest.raises(LongbertError, match=r"--output .* is a folder; name a file in it"):
        check_output(tmp_path)


def test_an_output_that_is_the_input_or_inside_the_model_is_refused_and_the_input_kept(tmp_path, monkeypatch):
    """`longbert predict r s.txt -o s.txt` once replaced the texts with their predictions."""
    def no_loading(directory):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(LongDocumentClassifier, "from_pretrained", no_loading)
    texts = tmp_path / "s.txt"
    texts.write_text("a text\n")
    (tmp_path / "run" / "best").mkdir(parents=True)
    (tmp_path / "run" / "best" / "longbert_config.json").write_text("{}")
    (tmp_path / "run" / "best" / "head.safetensors").write_text("weights")
    with pytest.raises(LongbertError, match=r"--output .*s.txt is the input .*s.txt, which this command reads"):
        predict_file(tmp_path / "run", str(texts), tmp_path / "." / "s.txt")
    with pytest.raises(LongbertError, match=r"--output .*head.safetensors is inside the model folder .*run/best, "):
        predict_file(tmp_path / "run", str(texts), tmp_path / "run" / "best" / "head.safetensors")
    with pytest.raises(LongbertError, match=r"--output .*new.jsonl is inside the model folder"):
        predict_file(tmp_path / "run" / "best", str(texts), tmp_path / "run" / "best" / "new.jsonl")
    from longbert.inference.embed import embed_file

    with pytest.raises(LongbertError, match="is the input"):
        embed_file(tmp_path / "run", str(tmp_path / "v.jsonl"), tmp_path / "v.jsonl")
    assert texts.read_text() == "a text\n" and (tmp_path / "run" / "best" / "head.safetensors").read_text() == "weights"


def test_bad_arguments_fail_before_the_model_loads(tmp_path, monkeypatch):
    def no_loading(directory):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(LongDocumentClassifier, "from_pretrained", no_loading)
    (tmp_path / "in.txt").write_text("a text\n")
    with pytest.raises(LongbertError, match="does not exist"):
        predict_file(tmp_path, str(tmp_path / "in.txt"), tmp_path / "no" / "out.jsonl")
    with pytest.raises(LongbertError, match="--batch-size must be >= 1, got 0"):
        predict_file(tmp_path, str(tmp_path / "in.txt"), batch_size=0)
    with pytest.raises(LongbertError, match="--precision must be one of auto, fp32, bf16, int8, got 'fp16'"):
        predict_file(tmp_path, str(tmp_path / "in.txt"), precision="fp16")
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    with pytest.raises(LongbertError, match="bad.jsonl:1 is not valid JSON"):
        predict_file(tmp_path, str(tmp_path / "bad.jsonl"), tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / ".out.jsonl.tmp").exists()


def test_predictions_say_how_many_texts_the_cap_cut(model_dir, tmp_path):
    texts = ["a short text", "word " * 100, "a long one, " * 30]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    result = predict_file(model_dir, str(tmp_path / "in.jsonl"), tmp_path / "out.jsonl", batch_size=2)
    rows = rows_of(tmp_path / "out.jsonl")
    assert result.documents == len(rows) == 3
    assert [r["n_tokens"] for r in rows] == [5, 102, 122], "the full length, with [CLS] and [SEP]"
    assert result.cut == 2 and result.cut_message() == "2 of 3 documents were cut at max_document_tokens=20"
    (tmp_path / "short.txt").write_text("a short text\n")
    assert predict_file(model_dir, str(tmp_path / "short.txt")).cut_message() is None


@pytest.mark.parametrize("name", ["rows.csv", "rows.TSV", "rows.parquet"])
def test_an_output_named_as_a_table_is_refused_before_the_model_loads(tmp_path, name):
    """`predict -o rows.csv` wrote JSON lines into a file named .csv."""
    source = tmp_path / "texts.txt"
    source.write_text("A fine film.\n")
    with pytest.raises(LongbertError, match=rf"^--output .*{name}: predict writes JSON lines, not a "
                                            rf"\.{name.split('.')[1]} table; name a \.jsonl file"):
        predict_file(tmp_path / "no-model", str(source), tmp_path / name)
    assert not (tmp_path / name).exists()
