"""Reading texts for `longbert predict`: lines split on '\\n' only, every bad input named by its line, the output path
checked before the model loads, and the token cap reported."""

from __future__ import annotations

import io
import json

import pytest

from helpers import build_model
from longbert.errors import LongbertError
from longbert.predict import check_output, predict_file, read_texts


@pytest.fixture(scope="module")
def model_dir(tiny_backbone_dir, tmp_path_factory):
    """A saved tiny model whose token cap is 20."""
    folder = tmp_path_factory.mktemp("model") / "saved"
    build_model(tiny_backbone_dir, "chunk", ["data.max_document_tokens=20"]).save_pretrained(folder)
    return folder


def stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_lines_split_on_newlines_only(tmp_path, monkeypatch):
    data = "one\u2028still one\r\ntwo\fstill two\n\nthree\u0085\x1c\x1d\n".encode()
    (tmp_path / "in.txt").write_bytes(data)
    expected = ["one\u2028still one", "two\fstill two", "three\u0085\x1c\x1d"]
    assert read_texts(str(tmp_path / "in.txt")) == expected
    stdin(monkeypatch, data)
    assert read_texts("-") == expected


def test_a_json_line_may_hold_a_raw_line_separator(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"text": "a\u2028b"}\n{"text": "c\\u2029d"}\r\n', encoding="utf-8")
    assert read_texts(str(tmp_path / "in.jsonl")) == ["a\u2028b", "c\u2029d"]


def test_a_byte_order_mark_is_not_part_of_the_first_text(tmp_path):
    (tmp_path / "in.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "first"}\n')
    assert read_texts(str(tmp_path / "in.jsonl")) == ["first"]


@pytest.mark.parametrize("name, content, message", [
    ("in.jsonl", b"", r"in.jsonl holds no texts"),
    ("in.jsonl", b'{"text": "ok"}\n{"text": "cut off\n{"text": "ok"}\n',
     r"in.jsonl:2 is not valid JSON \(Unterminated string starting at, column 10\)"),
    ("in.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n', r"in.jsonl:2 is not UTF-8 text \(byte 28 is 0xe9\); save it as UTF-8"),
    ("in.txt", b"fine\nalso fine\ncaf\xe9\n", r"in.txt:3 is not UTF-8 text \(byte 18 is 0xe9\)"),
    ("in.jsonl", b'{"text": "ok"}\n{"text": 5}\n', r"in.jsonl:2 has no string field 'text'"),
    ("in.jsonl", b'{"text": " "}\n', r"in.jsonl:1: the text is empty or whitespace-only"),
    ("in.txt", b"\n \n\t\n", r"in.txt holds no texts"),
], ids=["empty-jsonl", "bad-json-line", "latin-1-jsonl", "latin-1-txt", "number-text", "blank-text", "blank-txt"])
def test_bad_input_is_named_with_its_line(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(LongbertError, match=message):
        read_texts(str(tmp_path / name))


def test_a_missing_input_or_a_folder(tmp_path):
    with pytest.raises(LongbertError, match="input file not found: .*missing.txt"):
        read_texts(str(tmp_path / "missing.txt"))
    with pytest.raises(LongbertError, match="is a folder; give a .txt or .jsonl file, or - for stdin"):
        read_texts(str(tmp_path))


def test_bad_stdin_is_named(monkeypatch):
    stdin(monkeypatch, b"fine\n\xff\n")
    with pytest.raises(LongbertError, match=r"stdin:2 is not UTF-8 text \(byte 5 is 0xff\)"):
        read_texts("-")


def test_the_output_path_is_checked(tmp_path):
    check_output(None)
    check_output(tmp_path / "out.jsonl")
    with pytest.raises(LongbertError, match=r"--output .*/missing/out.jsonl: the folder .*/missing does not exist"):
        check_output(tmp_path / "missing" / "out.jsonl")
    with pytest.raises(LongbertError, match=r"--output .* is a folder; name a file in it"):
        check_output(tmp_path)


def test_bad_arguments_fail_before_the_model_loads(tmp_path, monkeypatch):
    from longbert.model import LongDocumentClassifier

    def no_loading(directory):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(LongDocumentClassifier, "from_pretrained", no_loading)
    (tmp_path / "in.txt").write_text("a text\n")
    with pytest.raises(LongbertError, match="does not exist"):
        predict_file(tmp_path, str(tmp_path / "in.txt"), tmp_path / "no" / "out.jsonl")
    with pytest.raises(LongbertError, match="--batch-size must be >= 1, got 0"):
        predict_file(tmp_path, str(tmp_path / "in.txt"), batch_size=0)
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    with pytest.raises(LongbertError, match="bad.jsonl:1 is not valid JSON"):
        predict_file(tmp_path, str(tmp_path / "bad.jsonl"), tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_predictions_say_how_many_texts_the_cap_cut(model_dir, tmp_path):
    texts = ["a short text", "word " * 100, "a long one, " * 30]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    result = predict_file(model_dir, str(tmp_path / "in.jsonl"), tmp_path / "out.jsonl", batch_size=2)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert rows == result.rows and len(rows) == 3
    assert [r["n_tokens"] for r in rows] == [5, 102, 122], "the full length, with [CLS] and [SEP]"
    assert result.cut == 2 and result.cut_message() == "2 of 3 documents were cut at max_document_tokens=20"
    again = predict_file(model_dir, str(tmp_path / "in.jsonl"), batch_size=8).rows
    for a, b in zip(again, rows):  # batching changes nothing
        assert a["label"] == b["label"] and a["n_tokens"] == b["n_tokens"]
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)
    (tmp_path / "short.txt").write_text("a short text\n")
    assert predict_file(model_dir, str(tmp_path / "short.txt")).cut_message() is None
