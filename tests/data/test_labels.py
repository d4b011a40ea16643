"""Integer labels: 0..C-1 are class indices; other integers (star ratings) are class names."""

from __future__ import annotations

import json

import pytest

from longbert.config import DataConfig
from longbert.data.documents import infer_label_names, label_index, load_corpus
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
