"""Loading documents from files and folders, carving validation, labels, the token cap, and bad data."""

from __future__ import annotations

import json

import pytest

from longbert.config import DataConfig
from longbert.data import collate, length_bucket, load_corpus, resolve_data_path
from longbert.errors import LongbertError

TEXTS = ["a good film " * 5, "a bad film " * 5, "great acting " * 5, "boring plot " * 5] * 5


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def folder(tmp_path):
    rows = [{"text": t, "label": ["neg", "pos"][i % 2]} for i, t in enumerate(TEXTS)]
    write_jsonl(tmp_path / "train.jsonl", rows)
    write_jsonl(tmp_path / "test.jsonl", rows[:6])
    return tmp_path


def config(path, **kwargs) -> DataConfig:
    return DataConfig(path=str(path), validation_fraction=0.25, **kwargs)


def test_folder_of_split_files(folder, tokenizer):
    corpus = load_corpus(config(folder), tokenizer, seed=1)
    assert corpus.label_names == ["neg", "pos"]
    assert set(corpus.splits) == {"train", "validation", "test"}
    assert len(corpus.splits["train"]) == 15 and len(corpus.splits["validation"]) == 5
    labels = list(corpus.splits["validation"]["labels"])
    assert sorted(set(labels)) == [0, 1], "validation is stratified"
    row = corpus.splits["test"][0]
    assert row["n_tokens"] == len(row["input_ids"]) + 2
    assert tokenizer.cls_token_id not in row["input_ids"], "documents are stored without special tokens"


def test_carving_is_seeded(folder, tokenizer):
    a = load_corpus(config(folder), tokenizer, seed=1).splits["validation"]["text"]
    b = load_corpus(config(folder), tokenizer, seed=1).splits["validation"]["text"]
    c = load_corpus(config(folder), tokenizer, seed=2).splits["validation"]["text"]
    assert list(a) == list(b) and list(a) != list(c)


def test_csv_and_parquet_and_gz(tmp_path, tokenizer):
    import pandas as pd

    frame = pd.DataFrame({"body": TEXTS, "y": [i % 2 for i in range(len(TEXTS))]})
    frame.to_csv(tmp_path / "train.csv", index=False)
    frame.to_csv(tmp_path / "test.csv", index=False)
    corpus = load_corpus(config(tmp_path, text_column="body", label_column="y"), tokenizer, seed=0)
    assert corpus.label_names == ["0", "1"]
    parquet = tmp_path / "pq"
    parquet.mkdir()
    frame.to_parquet(parquet / "train.parquet")
    frame.to_parquet(parquet / "test.parquet")
    assert len(load_corpus(config(parquet, text_column="body", label_column="y"), tokenizer, 0).splits["test"]) == 20


def test_single_file_is_the_train_split(tmp_path, tokenizer):
    write_jsonl(tmp_path / "all.jsonl", [{"text": t, "label": i % 2} for i, t in enumerate(TEXTS)])
    corpus = load_corpus(config(tmp_path / "all.jsonl", test_split=None), tokenizer, seed=0)
    assert set(corpus.splits) == {"train", "validation"}
    with pytest.raises(LongbertError, match="single file, which serves as the train split only"):
        load_corpus(config(tmp_path / "all.jsonl"), tokenizer, seed=0)


def test_aclimdb_style_folder(tmp_path, tokenizer):
    for split in ("train", "test"):
        for label in ("neg", "pos", "unsup"):
            (tmp_path / split / label).mkdir(parents=True)
            for i in range(6):
                (tmp_path / split / label / f"{i}_3.txt").write_text(f"{label} review number {i} " * 4)
    corpus = load_corpus(config(tmp_path, label_names=["neg", "pos"]), tokenizer, seed=0)
    assert corpus.label_names == ["neg", "pos"] and len(corpus.splits["test"]) == 12
    assert all(t.startswith(("neg", "pos")) for t in corpus.splits["test"]["text"])


def test_the_token_cap_is_applied_and_reported(folder, tokenizer):
    corpus = load_corpus(config(folder, max_document_tokens=5), tokenizer, seed=0)
    test = corpus.splits["test"]
    assert all(len(ids) <= 5 for ids in test["input_ids"])
    assert all(n > 7 for n in test["n_tokens"]), "n_tokens keeps the full length"
    assert corpus.stats["test"]["cut_by_token_cap"] == 6


def test_subsampling(folder, tokenizer):
    corpus = load_corpus(config(folder, max_train_documents=4, max_eval_documents=3), tokenizer, seed=0)
    assert [len(corpus.splits[s]) for s in ("train", "validation", "test")] == [4, 3, 3]


def test_imdb_is_found_in_shared_data_without_a_path():
    path = resolve_data_path("imdb")
    if path is None:
        pytest.skip("../shared/data is not beside this checkout")
    assert (path / "train.jsonl.gz").is_file()


def test_data_dir_environment_variable(folder, tmp_path, monkeypatch, tokenizer):
    monkeypatch.setenv("LONGBERT_DATA_DIR", str(folder.parent))
    assert resolve_data_path(folder.name) == folder


@pytest.mark.parametrize("rows, kwargs, message", [
    ([{"text": "fine", "label": "neg"}, {"text": "  \n ", "label": "pos"}], {}, r"document 1 of split 'train' is empty or whitespace-only"),
    ([{"text": "fine", "label": "neg"}, {"text": "ok", "label": "maybe"}], {"label_names": ["neg", "pos"]}, r"row 1 of split 'train': label 'maybe' is not one of label_names \['neg', 'pos'\]"),
    ([{"text": "fine", "label": 0}, {"text": "ok", "label": 5}], {"label_names": ["neg", "pos"]}, r"label 5 is outside 0..1"),
    ([{"body": "fine", "label": 0}], {}, r"data.text_column 'text' not found in split 'train'; columns: body, label"),
    ([{"text": "fine", "y": 0}], {}, r"data.label_column 'label' not found in split 'train'; columns: text, y"),
])
def test_bad_data_is_named(tmp_path, tokenizer, rows, kwargs, message):
    write_jsonl(tmp_path / "train.jsonl", rows * 4)
    with pytest.raises(LongbertError, match=message):
        load_corpus(config(tmp_path, test_split=None, **kwargs), tokenizer, seed=0)


def test_missing_paths_and_splits(tmp_path, tokenizer):
    with pytest.raises(LongbertError, match="data.path '/nonexistent/data' does not exist"):
        load_corpus(config("/nonexistent/data"), tokenizer, seed=0)
    write_jsonl(tmp_path / "train.jsonl", [{"text": "x", "label": 0}])
    with pytest.raises(LongbertError, match=r"split 'test' not found in .*; available splits: train"):
        load_corpus(config(tmp_path), tokenizer, seed=0)


def test_multi_label(tmp_path, tokenizer):
    rows = [{"text": t, "label": [["a"], ["b"], ["a", "b"], ["c"]][i % 4]} for i, t in enumerate(TEXTS)]
    write_jsonl(tmp_path / "train.jsonl", rows)
    corpus = load_corpus(config(tmp_path, test_split=None), tokenizer, seed=0, multi_label=True)
    assert corpus.label_names == ["a", "b", "c"]
    batch = collate([corpus.splits["train"][i] for i in range(3)])
    assert batch["labels"].shape == (3, 3) and batch["labels"].dtype.is_floating_point


def test_length_buckets():
    assert [length_bucket(n) for n in (3, 512, 513, 1024, 1025)] == ["<=512", "<=512", "513-1024", "513-1024", ">1024"]


def test_a_hub_id_that_cannot_be_reached_is_one_clear_error(tokenizer, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(LongbertError, match=r"data.path 'someone/no-such-dataset' is neither a local file or folder"):
        load_corpus(DataConfig(path="someone/no-such-dataset"), tokenizer, seed=0)
