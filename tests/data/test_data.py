"""Loading documents from files and folders, carving validation, labels, the token cap, and bad data."""

from __future__ import annotations

import json

import pytest

import longbert.data.documents
from longbert.config import DataConfig, load_recipe
from longbert.data.documents import (
    collate,
    load_corpus,
    text_pieces,
    tokenize_documents,
    tokenizer_fingerprint,
)
from longbert.data.lengths import length_bucket
from longbert.data.sources import resolve_data_path
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
    return DataConfig(path=str(path), **{"validation_fraction": 0.25, **kwargs})


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


def test_single_file_is_cut_into_the_splits(tmp_path, tokenizer):
    """The cut itself: tests/data/test_single_file_split.py."""
    write_jsonl(tmp_path / "all.jsonl", [{"text": t, "label": i % 2} for i, t in enumerate(TEXTS)])
    corpus = load_corpus(config(tmp_path / "all.jsonl", test_split=None), tokenizer, seed=0)
    assert set(corpus.splits) == {"train", "validation"}
    assert set(load_corpus(config(tmp_path / "all.jsonl"), tokenizer, seed=0).splits) == {"train", "validation",
                                                                                         "test"}
    with pytest.raises(LongbertError, match="single file, which holds one split"):
        load_corpus(config(tmp_path / "all.jsonl", validation_split="validation"), tokenizer, seed=0)


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
    ([{"text": "fine", "label": "neg"}, {"text": "  \n ", "label": "pos"}], {},
     r"train.jsonl:2: the document is empty or whitespace-only"),
    ([{"text": "fine", "label": "neg"}, {"text": "ok", "label": "maybe"}], {"label_names": ["neg", "pos"]},
     r"data: .*train.jsonl:2: label 'maybe' is not one of label_names \['neg', 'pos'\]"),
    ([{"text": "fine", "label": 0}, {"text": "ok", "label": 5}], {"label_names": ["neg", "pos"]},
     r"train.jsonl:2: label 5 is outside 0..1"),
    ([{"body": "fine", "label": 0}], {}, r"data.text_column 'text' not found in split 'train'; columns: body, label; "
     r"name the one that holds the texts with --set data.text_column=COLUMN"),
    ([{"text": "fine", "y": 0}], {}, r"data.label_column 'label' not found in split 'train'; columns: text, y; "
     r"name the one that holds the labels with --set data.label_column=COLUMN"),
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


GOOD_ROWS = [{"text": f"review number {i}", "label": ["neg", "pos"][i % 2]} for i in range(8)]
GOOD = "".join(json.dumps(r) + "\n" for r in GOOD_ROWS).encode()


@pytest.mark.parametrize("name, content, message", [
    ("train.jsonl", b"", r"data: .*train.jsonl is empty"),
    ("train.jsonl", b"\n  \n", r"data: .*train.jsonl is empty"),
    ("train.jsonl", GOOD + b'{"text": "cut off", "label": \n' + GOOD,
     r"data: .*train.jsonl:9 is not valid JSON \(Expecting value, column 30\)"),
    ("train.jsonl", GOOD + b"[1, 2]\n", r"train.jsonl:9 is not a JSON object"),
    ("train.jsonl", GOOD + '{"text": "caf\u00e9", "label": "pos"}\n'.encode("latin-1"),
     rf"data: .*train.jsonl:9 is not UTF-8 text \(byte {len(GOOD) + 13} is 0xe9\); save it as UTF-8"),
    ("train.jsonl.gz", None, r"train.jsonl.gz:9 is not valid JSON"),
    ("train.jsonl.gz", b"\x1f\x8b\x08\x00not gzip", r"data: .*train.jsonl.gz cannot be read: "),
    ("train.json", b'[{"text": "a", "label": "neg"},\n {"text": "b" "label": "pos"}]',
     r"train.json:2 is not valid JSON \(Expecting ',' delimiter, column 15\)"),
    ("train.csv", b"text,label\nfine,neg\ncaf\xe9,pos\n", r"data: .*train.csv:3 is not UTF-8 text \(byte 23 is 0xe9\)"),
    ("train.csv", b"text,label\n", r"train.csv has a header line but no rows"),
    ("train.csv", b"", r"train.csv is empty"),
    ("train.csv", b'text,label\n"an open quote,neg\n', r"data: cannot read .*train.csv: Error tokenizing data"),
], ids=["empty", "blank-lines", "bad-json-line", "not-an-object", "latin-1-jsonl", "bad-gz-line", "broken-gz",
        "bad-json-document", "latin-1-csv", "csv-header-only", "empty-csv", "csv-open-quote"])
def test_a_data_file_that_cannot_be_read_is_named_with_its_line(tmp_path, tokenizer, name, content, message):
    if content is None:
        import gzip

        content = gzip.compress(GOOD + b"{oops\n")
    (tmp_path / name).write_bytes(content)
    with pytest.raises(LongbertError, match=message):
        load_corpus(config(tmp_path, test_split=None), tokenizer, seed=0)


def test_a_json_document_still_loads(tmp_path, tokenizer):
    (tmp_path / "train.json").write_text(json.dumps(GOOD_ROWS, indent=1))
    assert len(load_corpus(config(tmp_path, test_split=None), tokenizer, seed=0).splits["train"]) == 6


def test_an_aclimdb_file_that_is_not_utf8_is_named(tmp_path, tokenizer):
    for split in ("train", "test"):
        for label in ("neg", "pos"):
            (tmp_path / split / label).mkdir(parents=True)
            for i in range(4):
                (tmp_path / split / label / f"{i}_3.txt").write_text(f"{label} review {i}")
    (tmp_path / "test" / "pos" / "2_3.txt").write_bytes(b"a fine\nfilm, caf\xe9 scenes")
    with pytest.raises(LongbertError, match=r"data: .*test/pos/2_3.txt:2 is not UTF-8 text \(byte 16 is 0xe9\)"):
        load_corpus(config(tmp_path), tokenizer, seed=0)


@pytest.mark.parametrize("value, message", [
    (5, r"data: .*train.jsonl:9: text is a number \(int\), not a string"),
    (2.5, r"data: .*train.jsonl:9: text is a number \(float\), not a string"),
    (None, r"data: .*train.jsonl:9: text is missing \(null\), not a string"),
])
def test_a_text_that_is_not_a_string_says_what_it_is(tmp_path, tokenizer, value, message):
    write_jsonl(tmp_path / "train.jsonl", GOOD_ROWS + [{"text": value, "label": "neg"}])
    with pytest.raises(LongbertError, match=message):
        load_corpus(config(tmp_path, test_split=None), tokenizer, seed=0)


def test_a_numeric_text_column_is_not_called_empty(tmp_path, tokenizer):
    write_jsonl(tmp_path / "train.jsonl", [{"text": i, "label": i % 2} for i in range(8)])
    with pytest.raises(LongbertError, match=r"train.jsonl:1: text is a number \(int\), not a string"):
        load_corpus(config(tmp_path, test_split=None), tokenizer, seed=0)


def test_a_training_set_of_one_class_is_refused(tmp_path, tokenizer):
    write_jsonl(tmp_path / "train.jsonl", [{"text": t, "label": "neg"} for t in TEXTS])
    with pytest.raises(LongbertError, match=r"all 20 documents of split 'train' have label 'neg'; "
                                            r"training needs at least 2 classes"):
        load_corpus(config(tmp_path, test_split=None, label_names=["neg", "pos"]), tokenizer, seed=0)
    write_jsonl(tmp_path / "train.jsonl", [{"text": t, "label": ["a", "b"]} for t in TEXTS])
    with pytest.raises(LongbertError, match=r"all 20 documents of split 'train' have the labels \['a', 'b'\]"):
        load_corpus(config(tmp_path, test_split=None, label_names=["a", "b", "c"]), tokenizer, seed=0, multi_label=True)


def test_a_subsample_of_one_class_is_refused(folder, tokenizer):
    with pytest.raises(LongbertError, match=r"all 1 training documents \(after carving validation and "
                                            r"data.max_train_documents\) have label"):
        load_corpus(config(folder, max_train_documents=1), tokenizer, seed=0)


def test_a_parquet_file_without_rows_or_that_is_not_parquet(tmp_path, tokenizer):
    import pandas as pd

    empty = pd.DataFrame({"text": pd.Series([], dtype=str), "label": pd.Series([], dtype=int)})
    empty.to_parquet(tmp_path / "train.parquet")
    with pytest.raises(LongbertError, match=r"data: .*train.parquet holds no rows"):
        load_corpus(config(tmp_path, test_split=None), tokenizer, seed=0)
    (tmp_path / "train.parquet").write_text("text,label\nnot parquet,0\n")
    with pytest.raises(LongbertError, match=r"data: .*train.parquet cannot be read as parquet: "):
        load_corpus(config(tmp_path, test_split=None), tokenizer, seed=0)


def long_text(words: int, seed: int = 0) -> str:
    """Words, punctuation, accents, CJK, overlong words and every kind of whitespace, at random."""
    import random

    pieces = ["film", "Café", "naïve", "don't", "well-made", "3.5", "!!", "(great)", "\u2028", "\n\n", "  ", "\t",
              "über", "東京", "x" * 120, "e\u0301te\u0301", "\r\n", "\f"]
    chooser = random.Random(seed)
    return " ".join(chooser.choice(pieces) for _ in range(words))


@pytest.mark.parametrize("piece_chars", [400, 4000])
def test_piecewise_tokenizing_equals_whole_text_tokenizing(tokenizer, monkeypatch, piece_chars):
    monkeypatch.setattr(longbert.data.documents, "PIECE_CHARS", piece_chars)
    monkeypatch.setattr(longbert.data.documents, "BATCH_CHARS", piece_chars * 3)
    texts = [long_text(6000), "a short one", long_text(300, seed=1)]
    whole = tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert len(whole[0]) > 5000
    ids, lengths = tokenize_documents(tokenizer, texts, cap=5000)
    assert [len(d) for d in ids] == [5000, len(whole[1]), len(whole[2])]
    assert ids == [d[:5000] for d in whole], "the same first `cap` ids"
    assert lengths == [len(d) + 2 for d in whole], "the same full length"


def test_a_huge_text_is_tokenized_in_bounded_pieces(tokenizer):
    """A few hundred thousand words never reach the tokenizer at once, and only `cap` ids are kept."""
    calls = []

    def counting_tokenizer(texts, **kwargs):
        calls.append(sum(len(t) for t in texts))
        return tokenizer(texts, **kwargs)

    text = "A long, long story; and then some more words. " * 40_000  # 360,000 words, 1.8 million characters
    ids, lengths = tokenize_documents(counting_tokenizer, [text, "and a short one"], cap=512)
    assert len(calls) > 1 and max(calls) <= longbert.data.documents.BATCH_CHARS
    assert [len(d) for d in ids] == [512, 4]
    assert lengths[0] == 12 * 40_000 + 2
    assert ids[0] == tokenizer(text[:5000], add_special_tokens=False)["input_ids"][:512]


def test_text_pieces_cut_before_whitespace_and_keep_every_character():
    text = "one two\tthree\nfour  five " + "x" * 30
    pieces = list(text_pieces(text, size=10))
    assert "".join(pieces) == text and all(len(p) <= 10 for p in pieces)
    assert pieces[:4] == ["one two", "\tthree", "\nfour ", " five"]
    assert pieces[4:] == [" " + "x" * 9, "x" * 10, "x" * 10, "x"], \
        "a stretch without whitespace is cut where it must be"
    assert list(text_pieces("", size=10)) == [""]


def test_an_empty_training_split_is_refused(tokenizer, monkeypatch):
    """A hub dataset may have an empty split; local files without rows are named by `file_problem` above."""
    from datasets import Dataset, DatasetDict

    empty = DatasetDict({"train": Dataset.from_dict({"text": [], "label": []})})
    monkeypatch.setattr(longbert.data.documents, "load_raw_splits", lambda config, wanted, *more: (empty, None))
    with pytest.raises(LongbertError, match="there are no documents of split 'train'"):
        load_corpus(DataConfig(path="someone/empty", test_split=None, label_names=["neg", "pos"]), tokenizer, seed=0)


def test_evaluation_on_long_test_documents_only(tmp_path, tokenizer):
    """data.test_longer_than keeps every test document over that length (and only those), before
    max_test_documents draws a subset; with validation of every length (validation_longer_than=0), train and
    validation are the same documents as without it."""
    rows = [{"text": ("word " * n).strip(), "label": ["neg", "pos"][i % 2]} for i, n in enumerate(range(5, 85, 2))]
    write_jsonl(tmp_path / "train.jsonl", rows)
    write_jsonl(tmp_path / "test.jsonl", rows)
    plain = load_corpus(config(tmp_path), tokenizer, seed=3)
    long = load_corpus(config(tmp_path, test_longer_than=50, validation_longer_than=0), tokenizer, seed=3)
    lengths = list(plain.splits["test"]["n_tokens"])
    assert list(long.splits["test"]["n_tokens"]) == [n for n in lengths if n > 50]
    assert long.splits["train"]["text"] == plain.splits["train"]["text"]
    assert long.splits["validation"]["text"] == plain.splits["validation"]["text"]
    assert long.stats["test"]["source_split"] == "test, documents over 50 tokens"
    capped = load_corpus(config(tmp_path, test_longer_than=50, validation_longer_than=0, max_eval_documents=3,
                                max_test_documents=10), tokenizer, seed=3)
    assert len(capped.splits["validation"]) == 3 and len(capped.splits["test"]) == 10
    assert all(n > 50 for n in capped.splits["test"]["n_tokens"])
    assert len(load_corpus(config(tmp_path, max_eval_documents=4), tokenizer, seed=3).splits["test"]) == 4
    with pytest.raises(LongbertError, match=r"data.test_longer_than=500: no document of split 'test' is that long "
                                            r"\(its longest has 85 tokens\)"):
        load_corpus(config(tmp_path, test_longer_than=500, validation_longer_than=0), tokenizer, seed=3)
    with pytest.raises(LongbertError, match=r"data.test_longer_than=500, which validation follows \(data.validation_"
                                            r"longer_than null; 0 validates on every length\): no document of the "
                                            r"validation carved from split 'train' is that long"):
        load_corpus(config(tmp_path, test_longer_than=500), tokenizer, seed=3)
    with pytest.raises(LongbertError, match="data.test_longer_than must be >= 0, got -1"):
        load_recipe(None, ["data.test_longer_than=-1"])


def test_validation_on_long_documents_only(tmp_path, tokenizer):
    """data.validation_longer_than keeps validation's documents over that length, drawn from the same carved part of
    train: the training documents and the test draw are those of a run without it, so the runs pair."""
    rows = [{"text": ("word " * n).strip(), "label": ["neg", "pos"][i % 2]} for i, n in enumerate(range(5, 165, 2))]
    write_jsonl(tmp_path / "train.jsonl", rows)
    write_jsonl(tmp_path / "test.jsonl", rows)
    settings = dict(validation_fraction=0.5, max_eval_documents=6, max_test_documents=9)
    plain = load_corpus(config(tmp_path, **settings), tokenizer, seed=3)
    long = load_corpus(config(tmp_path, validation_longer_than=60, **settings), tokenizer, seed=3)
    assert long.splits["train"]["text"] == plain.splits["train"]["text"]
    assert long.splits["test"]["text"] == plain.splits["test"]["text"]
    assert len(long.splits["validation"]) == 6 and min(long.splits["validation"]["n_tokens"]) > 60
    assert min(plain.splits["validation"]["n_tokens"]) <= 60  # without it, short ones are drawn too
    carved = set(load_corpus(config(tmp_path, validation_fraction=0.5), tokenizer, seed=3).splits["validation"]["text"])
    assert set(long.splits["validation"]["text"]) <= carved, "drawn from the part carved from train, nowhere else"
    assert long.stats["validation"]["source_split"] == "carved from train (50%), documents over 60 tokens"
    with pytest.raises(LongbertError, match=r"data.validation_longer_than=500: no document of the validation carved "
                                            r"from split 'train' is that long \(its longest has \d+ tokens\)"):
        load_corpus(config(tmp_path, validation_longer_than=500), tokenizer, seed=3)
    with pytest.raises(LongbertError, match="data.validation_longer_than must be >= 0, got -2"):
        load_recipe(None, ["data.validation_longer_than=-2"])


def test_validation_follows_the_tests_length_rule_with_as_many_documents_as_it_would_hold(tmp_path, tokenizer):
    """By default (validation_longer_than null) validation keeps only documents over data.test_longer_than. Where the
    carved validation holds too few, long training documents move into it, at most half of train's long ones, and
    the data line says how many; no document is in two roles, and one file's data-split.json records the move."""
    lengths = [5] * 60 + list(range(60, 100))  # 100 documents, 40 of them over 60 tokens
    rows = [{"text": ("word " * n).strip(), "label": ["neg", "pos"][i % 2]} for i, n in enumerate(lengths)]
    write_jsonl(tmp_path / "train.jsonl", rows)
    write_jsonl(tmp_path / "test.jsonl", rows)
    plain = load_corpus(config(tmp_path, test_longer_than=60, validation_longer_than=0), tokenizer, seed=3)
    follows = load_corpus(config(tmp_path, test_longer_than=60), tokenizer, seed=3)
    carved, validation = len(plain.splits["validation"]), follows.splits["validation"]
    assert carved == 25 and len(validation) == carved and min(validation["n_tokens"]) > 60
    moved = carved - sum(n > 60 for n in plain.splits["validation"]["n_tokens"])
    assert follows.stats["validation"]["source_split"] == (f"carved from train (25%) and {moved} long documents more "
                                                           "from train, documents over 60 tokens")
    assert not set(validation["text"]) & set(follows.splits["train"]["text"])
    assert len(follows.splits["train"]) == len(plain.splits["train"]) - moved
    assert sum(n > 60 for n in follows.splits["train"]["n_tokens"]) >= moved  # train keeps at least as many long
    few = load_corpus(config(tmp_path, test_longer_than=90), tokenizer, seed=3)  # 11 over 90: at most half move
    long_left = sum(n > 90 for n in few.splits["train"]["n_tokens"])
    assert all(n > 90 for n in few.splits["validation"]["n_tokens"])
    assert long_left >= len(few.splits["validation"]) - 2

    single = tmp_path / "one" / "reviews.jsonl"
    single.parent.mkdir()
    write_jsonl(single, rows * 2)
    corpus = load_corpus(DataConfig(path=str(single), validation_fraction=0.25, test_longer_than=60), tokenizer,
                         seed=3)
    recorded = corpus.file_split.rows  # each role's rows before the length rule and the subsets, as before
    assert "long documents more from train" in corpus.stats["validation"]["source_split"]
    assert min(corpus.splits["validation"]["n_tokens"]) > 60
    assert sum(lengths[r % 100] + 2 > 60 for r in recorded["validation"]) == len(corpus.splits["validation"])
    assert not set(recorded["validation"]) & (set(recorded["train"]) | set(recorded["test"]))


def test_tokenized_splits_are_cached_on_disk_and_reused(folder, tokenizer, tmp_path, monkeypatch):
    """The second load of the same data tokenizes nothing and gives the same corpus; a different cap or tokenizer
    setting tokenizes again; a damaged entry is rebuilt; `off` writes nothing."""
    calls = []
    tokenize = longbert.data.documents.tokenize_documents

    def counting(tokenizer, texts, cap):
        calls.append(len(texts))
        return tokenize(tokenizer, texts, cap)

    monkeypatch.setattr(longbert.data.documents, "tokenize_documents", counting)
    cache = tmp_path / "token-cache"
    monkeypatch.setenv("LONGBERT_TOKEN_CACHE", str(cache))
    first = load_corpus(config(folder), tokenizer, seed=1)
    assert sorted(calls) == [5, 6, 15] and len(list(cache.iterdir())) == 3
    calls.clear()
    again = load_corpus(config(folder), tokenizer, seed=1)
    assert calls == [], "every split came from the cache"
    for split in first.splits:
        assert again.splits[split].to_dict() == first.splits[split].to_dict()
    assert load_corpus(config(folder, max_document_tokens=3), tokenizer, seed=1).stats["train"]["cut_by_token_cap"]
    assert sorted(calls) == [5, 6, 15], "another cap is another entry"

    calls.clear()
    for entry in cache.iterdir():
        for part in entry.iterdir():
            part.write_bytes(b"not arrow")
    damaged = load_corpus(config(folder), tokenizer, seed=1)
    assert sorted(calls) == [5, 6, 15] and damaged.splits["test"].to_dict() == first.splits["test"].to_dict()

    calls.clear()
    monkeypatch.setenv("LONGBERT_TOKEN_CACHE", "off")
    load_corpus(config(folder), tokenizer, seed=1)
    assert sorted(calls) == [5, 6, 15]
    assert not [p for p in cache.iterdir() if p.name.startswith(".")], "no half-written entry is left"


def test_the_token_cache_key_follows_the_tokenizer(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("LONGBERT_TOKEN_CACHE", str(tmp_path))
    lowercase = tokenizer_fingerprint(tokenizer)
    assert tokenizer_fingerprint(tokenizer) == lowercase
    cased = tokenizer.__class__.from_pretrained(tokenizer.name_or_path, do_lower_case=False)
    assert tokenizer_fingerprint(cased) != lowercase
