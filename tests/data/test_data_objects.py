"""Documents from objects in memory (datasets.Dataset / DatasetDict, pandas DataFrame, texts and labels) and from
save_to_disk folders; a validation split beside train used without being named; where validation came from."""

from __future__ import annotations

import json

import pytest

import longbert
from longbert.config import DataConfig
from longbert.data.documents import load_corpus
from longbert.data.objects import describe_data_object
from longbert.errors import LongbertError

TEXTS = ["a good film " * 5, "a bad film " * 5, "great acting " * 5, "boring plot " * 5] * 5
LABELS = ["neg", "pos"] * 10


def config(**kwargs) -> DataConfig:
    return DataConfig(path="not-used", validation_fraction=0.25, **kwargs)


def frame(texts=TEXTS, labels=LABELS, text="text", label="label"):
    import pandas as pd

    return pd.DataFrame({text: texts, label: labels})


# ---------------------------------------------------------------------------------------------------------------
# Objects in memory, through the loader


def test_a_single_dataframe_is_the_train_split_and_validation_is_carved(tokenizer):
    corpus = load_corpus(config(test_split=None), tokenizer, seed=0, source=frame())
    assert set(corpus.splits) == {"train", "validation"}
    assert len(corpus.splits["train"]) == 15 and len(corpus.splits["validation"]) == 5
    assert corpus.label_names == ["neg", "pos"]
    assert corpus.stats["validation"]["source_split"] == "carved from train (25%)"
    assert corpus.stats["train"]["source_split"] == "train"
    assert "5 validation (carved from train (25%)" in corpus.summary()


def test_every_kind_of_object_gives_the_same_documents(tokenizer):
    from datasets import Dataset

    rows = [{"text": t, "label": y} for t, y in zip(TEXTS, LABELS)]
    kinds = {
        "pandas DataFrame": frame(),
        "datasets.Dataset": Dataset.from_list(rows),
        "(texts, labels) pair": (TEXTS, LABELS),
        "list of rows": rows,
        "dict of columns": {"text": TEXTS, "label": LABELS},
    }
    seen = {}
    for kind, obj in kinds.items():
        assert describe_data_object(obj, config()) == f"in-memory {kind} (train: 20 rows)"
        corpus = load_corpus(config(test_split=None), tokenizer, seed=3, source=obj)
        seen[kind] = {role: (list(s["text"]), list(s["labels"])) for role, s in corpus.splits.items()}
    first = next(iter(seen.values()))
    assert all(value == first for value in seen.values()), "same rows, same seed: same splits"


def test_a_dict_of_splits_by_name(tokenizer):
    data = {"train": (TEXTS, LABELS), "test": frame(TEXTS[:6], LABELS[:6])}
    assert describe_data_object(data, config()) == (
        "in-memory dict of (texts, labels) pair, pandas DataFrame by split (train: 20 rows, test: 6 rows)")
    corpus = load_corpus(config(), tokenizer, seed=0, source=data)
    assert set(corpus.splits) == {"train", "validation", "test"}
    assert list(corpus.splits["test"]["text"]) == TEXTS[:6]
    nested = {"train": {"text": TEXTS, "label": LABELS}, "test": {"text": TEXTS[:6], "label": LABELS[:6]}}
    assert len(load_corpus(config(), tokenizer, seed=0, source=nested).splits["test"]) == 6


def test_a_datasetdict_with_a_validation_split_uses_it_and_reads_classlabel_names(tokenizer):
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

    features = Features({"text": Value("string"), "label": ClassLabel(names=["bad", "good"])})
    split = Dataset.from_dict({"text": TEXTS, "label": [i % 2 for i in range(20)]}, features=features)
    data = DatasetDict({"train": split, "validation": split.select(range(4)), "test": split.select(range(6))})
    corpus = load_corpus(config(), tokenizer, seed=0, source=data)
    assert corpus.label_names == ["bad", "good"]
    assert len(corpus.splits["train"]) == 20 and len(corpus.splits["validation"]) == 4
    assert corpus.stats["validation"]["source_split"] == "validation"


def test_the_recipe_data_settings_apply_to_objects(tokenizer):
    data = {"train": frame(text="body", label="y"), "test": frame(TEXTS[:6], LABELS[:6], text="body", label="y")}
    corpus = load_corpus(config(text_column="body", label_column="y", label_names=["pos", "neg"],
                                max_train_documents=6, max_eval_documents=3, max_document_tokens=4),
                         tokenizer, seed=0, source=data)
    assert corpus.label_names == ["pos", "neg"]
    assert len(corpus.splits["train"]) == 6 and len(corpus.splits["validation"]) == 3
    assert len(corpus.splits["test"]) == 3
    assert max(len(ids) for ids in corpus.splits["train"]["input_ids"]) == 4
    assert corpus.stats["train"]["cut_by_token_cap"] == 6
    pairs = load_corpus(config(text_column="body", label_column="y", test_split=None), tokenizer, seed=0,
                        source=(TEXTS, LABELS))
    assert len(pairs.splits["train"]) == 15, "a (texts, labels) pair takes the recipe's column names"


@pytest.mark.parametrize("data, kwargs, message", [
    (frame(text="body"), {"test_split": None}, "data.text_column 'text' not found in split 'train'; columns: body"),
    ({"train": frame(text="body")}, {"test_split": None}, "data.text_column 'text' not found in split 'train'"),
    (frame(), {}, r"data: a single pandas DataFrame, which serves as the train split only; set data.test_split"),
    ({"train": frame()}, {}, r"data: split 'test' not found; available splits: train"),
    ((TEXTS, LABELS[:3]), {"test_split": None}, "data: 20 texts but 3 labels"),
    ({"text": TEXTS, "label": LABELS[:3]}, {"test_split": None}, "data: the columns differ in length"),
    ({1: frame()}, {}, "data: a dict of splits needs split names as keys"),
    ({"body": TEXTS, "label": LABELS}, {}, "data: a dict of columns needs data.text_column 'text' among its keys; "
                                           "keys: body, label"),
    ({"train": 42}, {}, r"data\['train'\]: cannot use a builtins.int; pass a datasets.Dataset or DatasetDict, a "
                        r"pandas DataFrame, a \(texts, labels\) pair"),
    ("reviews.csv", {}, "data: cannot use a builtins.str; pass a datasets.Dataset or DatasetDict"),
    ({"texts", "labels"}, {}, "data: cannot use a builtins.set"),
])
def test_objects_that_cannot_be_used_are_named(tokenizer, data, kwargs, message):
    with pytest.raises(LongbertError, match=message):
        load_corpus(config(**kwargs), tokenizer, seed=0, source=data)


def test_a_recorded_object_must_be_passed_again_and_be_the_same(tokenizer):
    recorded = config(test_split=None)
    recorded.path = describe_data_object(frame(), recorded)
    with pytest.raises(LongbertError, match=r"came from an in-memory pandas DataFrame \(train: 20 rows\); pass the "
                                            r"same object again as data="):
        load_corpus(recorded, tokenizer, seed=0)
    with pytest.raises(LongbertError, match=r"the object given is an in-memory pandas DataFrame \(train: 8 rows\), "
                                            r"but this run was trained on an in-memory pandas DataFrame \(train: 20"):
        load_corpus(recorded, tokenizer, seed=0, source=frame(TEXTS[:8], LABELS[:8]))
    assert len(load_corpus(recorded, tokenizer, seed=0, source=frame()).splits["train"]) == 15


# ---------------------------------------------------------------------------------------------------------------
# save_to_disk folders and a validation split beside train


def test_a_saved_datasetdict_is_not_mistaken_for_an_aclimdb_folder(tmp_path, tokenizer):
    from datasets import Dataset, DatasetDict

    split = Dataset.from_dict({"text": TEXTS, "label": LABELS})
    DatasetDict({"train": split, "validation": split.select(range(4)), "test": split.select(range(6))}).save_to_disk(
        str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "train").is_dir(), "the folders the aclImdb rule would take for splits"
    corpus = load_corpus(DataConfig(path=str(tmp_path / "saved")), tokenizer, seed=0)
    assert {role: len(s) for role, s in corpus.splits.items()} == {"train": 20, "validation": 4, "test": 6}
    assert corpus.stats["validation"]["source_split"] == "validation"


def test_a_saved_dataset_is_the_train_split(tmp_path, tokenizer):
    from datasets import Dataset

    Dataset.from_dict({"text": TEXTS, "label": LABELS}).save_to_disk(str(tmp_path / "saved"))
    corpus = load_corpus(DataConfig(path=str(tmp_path / "saved"), test_split=None), tokenizer, seed=0)
    assert len(corpus.splits["train"]) == 18 and len(corpus.splits["validation"]) == 2
    with pytest.raises(LongbertError, match="holds one saved Dataset, which serves as the train split only"):
        load_corpus(DataConfig(path=str(tmp_path / "saved")), tokenizer, seed=0)


def test_a_damaged_save_to_disk_folder_is_named(tmp_path, tokenizer):
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "dataset_dict.json").write_text('{"splits": ["train"]}')
    with pytest.raises(LongbertError, match="looks like a save_to_disk folder but cannot be loaded"):
        load_corpus(DataConfig(path=str(tmp_path / "saved"), test_split=None), tokenizer, seed=0)


def write_jsonl(path, texts, labels):
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in zip(texts, labels)))


def test_a_validation_file_beside_train_is_used_without_being_named(tmp_path, tokenizer):
    write_jsonl(tmp_path / "train.jsonl", TEXTS, LABELS)
    write_jsonl(tmp_path / "test.jsonl", TEXTS[:6], LABELS[:6])
    carved = load_corpus(DataConfig(path=str(tmp_path), validation_fraction=0.25), tokenizer, seed=0)
    assert len(carved.splits["validation"]) == 5
    assert carved.stats["validation"]["source_split"] == "carved from train (25%)"
    write_jsonl(tmp_path / "validation.jsonl", TEXTS[:4], LABELS[:4])
    corpus = load_corpus(DataConfig(path=str(tmp_path), validation_fraction=0.25), tokenizer, seed=0)
    assert len(corpus.splits["train"]) == 20, "nothing is carved from train"
    assert list(corpus.splits["validation"]["text"]) == TEXTS[:4]
    assert corpus.stats["validation"]["source_split"] == "validation"
    assert "4 validation (0 over 512 tokens)" in corpus.summary()
    named = load_corpus(DataConfig(path=str(tmp_path), validation_split="test"), tokenizer, seed=0)
    assert named.stats["validation"]["source_split"] == "test", "a named validation split still wins"


def test_an_aclimdb_validation_folder_is_used_without_being_named(tmp_path, tokenizer):
    for split, count in (("train", 6), ("validation", 2), ("test", 2)):
        for label in ("neg", "pos"):
            (tmp_path / split / label).mkdir(parents=True)
            for i in range(count):
                (tmp_path / split / label / f"{i}.txt").write_text(f"{label} review {i} " * 4)
    corpus = load_corpus(DataConfig(path=str(tmp_path)), tokenizer, seed=0)
    assert {role: len(s) for role, s in corpus.splits.items()} == {"train": 12, "validation": 4, "test": 4}


# ---------------------------------------------------------------------------------------------------------------
# Round trips through the library: train, evaluate, compare


def imdb_frames(imdb_slice):
    import pandas as pd

    return {split: pd.read_json(imdb_slice / f"{split}.jsonl", lines=True) for split in ("train", "test")}


def test_train_and_evaluate_a_dataframe_dict(tiny_recipe, imdb_slice, capsys):
    data = imdb_frames(imdb_slice)
    recipe = longbert.load_recipe(None, tiny_recipe + ["data.path=nowhere-at-all", "train.max_steps=2"])
    result = longbert.train(recipe, data=data)
    assert recipe.data.path == "nowhere-at-all", "the caller's recipe is left as it was"
    saved = longbert.load_recipe(result.folder / "recipe.yaml")
    assert saved.data.path == "in-memory dict of pandas DataFrame by split (train: 60 rows, test: 30 rows)"
    assert saved.data.label_names == ["neg", "pos"]
    assert "15 validation (carved from train (25%), " in capsys.readouterr().err, "said at the start of training"
    metrics = result.metrics
    assert metrics["data"]["validation"]["source_split"] == "carved from train (25%)"
    assert metrics["test"]["documents"] == 30
    with pytest.raises(LongbertError, match=r"pass the same object again as data= \(e\.g\. longbert\.evaluate"):
        longbert.evaluate(result.folder, "test")
    again = longbert.evaluate(result.folder, "test", data=data)
    assert again["accuracy"] == pytest.approx(metrics["test"]["accuracy"])
    # quantize and make_hybrid take the object again as the message says, as evaluate does
    from longbert.inference.quantize import quantize

    with pytest.raises(LongbertError, match=r"pass the same object again as data="):
        quantize(result.folder)
    assert quantize(result.folder, data=data)["documents"] == 15
    assert longbert.make_hybrid(result.folder, data=data).metrics["validation_documents"] == 15
    # Resuming with the same object continues the same recipe.
    resumed = longbert.load_recipe(None, tiny_recipe + ["data.path=nowhere-at-all", "train.max_steps=3"])
    with pytest.raises(LongbertError, match="the recipe differs"):
        longbert.train(resumed, resume=True, data=data)


def test_train_a_single_dataset_with_its_validation_carved(tiny_recipe, imdb_slice):
    from datasets import Dataset

    data = Dataset.from_pandas(imdb_frames(imdb_slice)["train"])
    recipe = longbert.load_recipe(None, tiny_recipe + ["data.test_split=null", "train.max_steps=1"])
    result = longbert.train(recipe, data=data)
    assert result.metrics["data"]["train"]["documents"] == 45 and "test" not in result.metrics
    saved = longbert.load_recipe(result.folder / "recipe.yaml")
    assert saved.data.path == "in-memory datasets.Dataset (train: 60 rows)"
    assert longbert.evaluate(result.folder, "validation", data=data)["documents"] == 15


@pytest.mark.slow  # a whole compare (12 s); train and evaluate on data in memory stay in CI above
def test_compare_with_data_in_memory(tiny_backbone_dir, imdb_slice, tmp_path):
    data = imdb_frames(imdb_slice)
    overrides = [f"backbone.name={tiny_backbone_dir}", "data.path=nowhere-at-all", "data.label_names=[neg, pos]",
                 "data.validation_fraction=0.25", "data.max_document_tokens=200", "train.max_steps=1",
                 "train.batch_size=8", 'train.mixed_precision="no"', "eval.batch_size=16", "chunk.window=62"]
    settings = dict(strategies=["chunk"], overrides=overrides, name="mem", runs_dir=tmp_path / "runs",
                    reports_dir=tmp_path / "reports", speed_documents=4, examples=0, data=data)
    results = longbert.compare(**settings).metrics
    saved = longbert.load_recipe(tmp_path / "runs" / "mem" / "chunk" / "recipe.yaml")
    assert saved.data.path.startswith("in-memory dict of pandas DataFrame by split (train: 60 rows")
    assert (tmp_path / "reports" / "mem" / "report.md").is_file() and "data=..." in results["command"]
    assert longbert.compare(**settings).metrics["strategy_order"] == ["chunk"], "a second call reuses the finished run"


def test_the_readme_route_without_shared_data_reads_a_saved_datasetdict(tmp_path, tokenizer):
    """README, "Without this project's ../shared/data": the quick recipe pointed at a save_to_disk folder takes its
    splits from it."""
    from datasets import Dataset, DatasetDict

    from longbert.config import load_recipe

    split = Dataset.from_dict({"text": TEXTS * 10, "label": LABELS * 10})  # 2% of 200 for validation: 4
    DatasetDict({"train": split, "test": split.select(range(6))}).save_to_disk(str(tmp_path / "imdb_saved"))
    recipe = load_recipe("imdb_quick", [f"data.path={tmp_path / 'imdb_saved'}"])
    corpus = load_corpus(recipe.data, tokenizer, seed=recipe.seed)
    sizes = {role: len(s) for role, s in corpus.splits.items()}
    assert sizes == {"train": 196, "validation": 4, "test": 6}
