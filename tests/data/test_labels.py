"""Labels: integers 0..C-1 are class indices, other integers (star ratings) are class names; a missing label is
refused, never made a class; every bad row is named by its file and line, counted from 1."""

from __future__ import annotations

import json

import pytest

from longbert.config import DataConfig
from longbert.data.documents import load_corpus
from longbert.data.labels import infer_label_names, label_index
from longbert.errors import LongbertError


def test_indices_stay_indices_and_other_integers_become_names():
    assert infer_label_names([0, 2, 1, 1], False) == ["0", "1", "2"]
    assert infer_label_names([10, 1, 7, 4, 1], False) == ["1", "4", "7", "10"]  # numeric order, no empty classes
    names = ["1", "4", "7", "10"]
    assert [label_index(v, names, "row") for v in (1, 4, 7, 10)] == [0, 1, 2, 3]
    with pytest.raises(LongbertError, match="label 5 is not one of label_names"):
        label_index(5, names, "row")
    assert label_index(1, ["neg", "pos"], "row") == 1  # named classes: an integer is an index, as before


def test_a_rating_column_beside_a_label_column_with_metadata(tmp_path, tokenizer):
    rows = [("a good film", 1, 10), ("bad", 0, 1), ("fine", 1, 7), ("dull", 0, 4)] * 3
    for split in ("train", "test"):
        with open(tmp_path / f"{split}.jsonl", "w") as f:
            for text, label, rating in rows:
                f.write(json.dumps({"text": text, "label": label, "rating": rating}) + "\n")
    (tmp_path / "metadata.json").write_text(json.dumps({"label_names": ["neg", "pos"]}))
    by_rating = load_corpus(DataConfig(path=str(tmp_path), label_column="rating", validation_fraction=0.34),
                            tokenizer, seed=0)
    assert by_rating.label_names == ["1", "4", "7", "10"]  # metadata.json names the `label` field only
    assert sorted(set(by_rating.splits["test"]["labels"])) == [0, 1, 2, 3]
    by_label = load_corpus(DataConfig(path=str(tmp_path), validation_fraction=0.34), tokenizer, seed=0)
    assert by_label.label_names == ["neg", "pos"]


def test_document_ids_reach_the_tokenized_splits(tmp_path, tokenizer):
    rows = [{"text": f"review {i}", "label": i % 2, "id": f"doc-{i}"} for i in range(12)]
    for split in ("train", "test"):
        with open(tmp_path / f"{split}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    corpus = load_corpus(DataConfig(path=str(tmp_path), validation_fraction=0.34), tokenizer, seed=0)
    test = corpus.splits["test"]
    assert list(test["id"]) == [f"doc-{i}" for i in range(12)]
    assert all(f"review {doc[4:]}" == text for doc, text in zip(corpus.splits["validation"]["id"],
                                                                 corpus.splits["validation"]["text"]))
    no_ids = load_corpus(DataConfig(path=str(tmp_path), id_column=None, validation_fraction=0.34), tokenizer, seed=0)
    assert "id" not in no_ids.splits["test"].column_names


def write(path, rows) -> None:
    """JSON lines, with a blank line after the first row: rows and lines are counted apart."""
    lines = [json.dumps(r) for r in rows]
    path.write_text("\n".join(lines[:1] + [""] + lines[1:]) + "\n")


GOOD = [{"text": f"review {i}", "label": ["neg", "pos"][i % 2]} for i in range(8)]


@pytest.mark.parametrize("label_names", [None, ["neg", "pos"]], ids=["inferred", "given"])
def test_a_missing_label_is_refused_by_its_line_and_never_made_a_class(tmp_path, tokenizer, label_names):
    write(tmp_path / "train.jsonl", GOOD[:5] + [{"text": "no label here", "label": None}] + GOOD[5:])
    with pytest.raises(LongbertError, match=r"^data: .*train.jsonl:7: the label is missing \(null\); every "
                                            r"document needs one$"):
        load_corpus(DataConfig(path=str(tmp_path), test_split=None, label_names=label_names), tokenizer, seed=0)
    with pytest.raises(LongbertError, match="a label is missing"):
        infer_label_names(["neg", None, "pos"], False)
    with pytest.raises(LongbertError, match="row 3: the label is missing"):
        label_index(None, ["neg", "pos"], "row 3")


def test_a_missing_label_in_a_csv_and_in_a_multi_label_list(tmp_path, tokenizer):
    """An empty field of an integer csv column reaches longbert as NaN."""
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"review {i},{i % 2}\n" for i in range(6))
                                        + '"a review\nover two lines",1\nno label,\n')
    with pytest.raises(LongbertError, match=r"train.csv:10: the label is missing \(null\)"):
        load_corpus(DataConfig(path=str(tmp_path), test_split=None), tokenizer, seed=0)
    (tmp_path / "train.csv").unlink()
    write(tmp_path / "train.jsonl", [{"text": f"review {i}", "label": [["a"], ["b"], ["a", None]][i % 3]}
                                     for i in range(6)])
    with pytest.raises(LongbertError, match=r"train.jsonl:4: the label is missing \(null\); every document needs "
                                            r"one \(an empty list \[\] says it has none\)"):
        load_corpus(DataConfig(path=str(tmp_path), test_split=None), tokenizer, seed=0, multi_label=True)


def test_bad_rows_are_named_by_file_and_line_from_1_wherever_they_are(tmp_path, tokenizer):
    """A csv counts its header as line 1 and a quoted line break as a line; blank lines count too; a file whose
    rows are not lines (parquet) and a source without files say the row, from 1."""
    import pandas as pd

    bad = {"text": "ok", "label": "maybe"}
    write(tmp_path / "train.jsonl", GOOD)
    write(tmp_path / "test.jsonl", GOOD[:2] + [bad])
    names = {"label_names": ["neg", "pos"]}
    with pytest.raises(LongbertError, match=r"^data: .*test.jsonl:4: label 'maybe' is not one of label_names"):
        load_corpus(DataConfig(path=str(tmp_path), **names), tokenizer, seed=0)
    (tmp_path / "test.jsonl").unlink()
    (tmp_path / "train.jsonl").unlink()
    (tmp_path / "train.csv").write_text('text,label\n"a film\n\nin three lines",neg\n\nfine,pos\nok,maybe\n')
    with pytest.raises(LongbertError, match=r"^data: .*train.csv:7: label 'maybe' is not one of label_names"):
        load_corpus(DataConfig(path=str(tmp_path), test_split=None, **names), tokenizer, seed=0)
    (tmp_path / "train.csv").unlink()
    pd.DataFrame(GOOD[:2] + [bad]).to_parquet(tmp_path / "train.parquet")
    with pytest.raises(LongbertError, match=r"^data: .*train.parquet row 3: label 'maybe' is not one of"):
        load_corpus(DataConfig(path=str(tmp_path), test_split=None, **names), tokenizer, seed=0)
    with pytest.raises(LongbertError, match=r"^data: row 3 of split 'train': label 'maybe' is not one of"):
        load_corpus(DataConfig(path="unused", test_split=None, **names), tokenizer, seed=0,
                    source=GOOD[:2] + [bad] + GOOD)


def _write(path, labels, texts=None):
    texts = texts or [f"document number {i} about the harbour" for i in range(len(labels))]
    path.write_text("".join(json.dumps({"text": t, "label": label}) + "\n" for t, label in zip(texts, labels)))
    return path


@pytest.mark.parametrize("labels, fragments", [
    (["pos", "neg"] * 20 + [1, 0] * 10, ["mix class names and numbers", "mixed.jsonl:1: 'pos'", "mixed.jsonl:41: 1"]),
    (["pos", "neg"] * 20 + ["1", "0"] * 10, ["mix class names and numbers", "mixed.jsonl:41: '1'"]),
    (["pos", "neg"] * 20 + ["pos "], ["mixed.jsonl:41: label 'pos ' has spaces around it", "write it as 'pos'"]),
    ([0.0, 1.0] * 20 + [0.5], ["mixed.jsonl:41: label 0.5 is not a whole number"]),
    (["pos", "neg"] * 20 + [1.0], ["mix class names and numbers", "mixed.jsonl:41: 1.0"]),
], ids=["names-and-integers", "names-and-digit-strings", "trailing-space", "a-fraction", "names-and-floats"])
def test_labels_are_read_as_given_or_refused_in_one_line_naming_the_rows(tmp_path, tokenizer, labels, fragments):
    path = _write(tmp_path / "mixed.jsonl", labels)
    with pytest.raises(LongbertError) as raised:
        load_corpus(DataConfig(path=str(path)), tokenizer, seed=0)
    message = str(raised.value)
    assert "\n" not in message and "mixed.jsonl" in message
    for fragment in fragments:
        assert fragment in message


def test_whole_float_labels_are_the_integers_they_hold(tmp_path, tokenizer):
    """JSON's 1.0 (or pandas' floats for an integer column with an empty field) is index 1, not a class '1.0'."""
    assert infer_label_names([0.0, 1.0, 1.0], False) == ["0", "1"]
    assert infer_label_names([1.0, 10.0, 4.0], False) == ["1", "4", "10"]
    assert label_index(1.0, ["neg", "pos"], "row") == 1 and label_index(10.0, ["1", "4", "10"], "row") == 2
    path = _write(tmp_path / "floats.jsonl", [0.0, 1.0] * 30)
    corpus = load_corpus(DataConfig(path=str(path)), tokenizer, seed=0)
    assert corpus.label_names == ["0", "1"]
    assert sorted(set(corpus.splits["train"]["labels"])) == [0, 1]


def test_texts_given_twice_across_splits_are_counted_in_one_warning(tmp_path, tokenizer, caplog):
    texts = [f"document number {i} about the harbour" for i in range(12)] * 5  # every text five times
    path = _write(tmp_path / "twice.jsonl", ["pos", "neg"] * 30, texts)
    with caplog.at_level("WARNING"):
        corpus = load_corpus(DataConfig(path=str(path)), tokenizer, seed=0)
    warned = [r.getMessage() for r in caplog.records if "word for word" in r.getMessage()]
    shared = {role: sum(t in set(corpus.splits["train"]["text"]) for t in corpus.splits[role]["text"])
              for role in ("validation", "test")}
    assert len(warned) == 1 and shared["validation"] and shared["test"]
    assert f"{shared['validation']} validation documents and {shared['test']} test documents" in warned[0]
    distinct = _write(tmp_path / "once.jsonl", ["pos", "neg"] * 30, [f"text {i} of its own" for i in range(60)])
    caplog.clear()
    with caplog.at_level("WARNING"):
        load_corpus(DataConfig(path=str(distinct)), tokenizer, seed=0)
    assert not [r for r in caplog.records if "word for word" in r.getMessage()]
