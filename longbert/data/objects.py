"""Documents from an object in memory (a datasets.Dataset or DatasetDict, a pandas DataFrame, texts and labels,
rows, columns, or a dict of these by split; see `data_object_splits`) -> datasets.Dataset per split.

`train(train_dataset=..., eval_dataset=...)` gives the train and validation roles their documents (`splits_by_role`).
A run trained on an object in memory records it in its recipe as `data.path: in-memory <kind> (<split>: <n> rows,
...)`; reading that run's data again (evaluate, compare) needs the same object, passed as `data=`.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from datasets import Dataset, DatasetDict

from longbert.errors import LongbertError

IN_MEMORY = "in-memory "  # how data.path begins in the recipe of a run whose documents came from a Python object
ACCEPTED_OBJECTS = ("a datasets.Dataset or DatasetDict, a pandas DataFrame, a (texts, labels) pair, a list of row "
                    "dicts, a dict of columns, or a dict of these by split name")


def data_object_splits(obj: Any, config) -> tuple[dict[str, Any], str, bool]:
    """Documents in memory -> (split name -> datasets.Dataset, what kind of object it was, whether it was a single
    split). Accepted: a datasets.DatasetDict; a dict of splits by name, each one of the following; or one split
    (the train split, `config.train_split`): a datasets.Dataset, a pandas DataFrame, a (texts, labels) pair (columns
    named by data.text_column and data.label_column), a list of row dicts, or a dict of columns (one that holds
    data.text_column). Anything else raises a LongbertError naming the accepted kinds."""
    if isinstance(obj, DatasetDict):
        return dict(obj), "datasets.DatasetDict", False
    if isinstance(obj, dict) and obj and config.text_column not in obj:
        if not all(isinstance(key, str) for key in obj):
            raise LongbertError(f"data: a dict of splits needs split names as keys, got {list(obj)[:5]}")
        if any(isinstance(v, list) and v and isinstance(v[0], (str, int, float)) for v in obj.values()):
            raise LongbertError(f"data: a dict of columns needs data.text_column {config.text_column!r} among its "
                                f"keys; keys: {', '.join(obj)}")
        splits, kinds = {}, []
        for split, value in obj.items():
            splits[split], kind = _one_split(value, config, f"data[{split!r}]")
            kinds.append(kind)
        return splits, f"dict of {', '.join(sorted(set(kinds)))} by split", False
    dataset, kind = _one_split(obj, config, "data")
    return {config.train_split: dataset}, kind, True


def _one_split(value: Any, config, where: str):
    """One split in memory -> (datasets.Dataset, what kind of object it was); one without rows is refused."""
    dataset, kind = _read_one_split(value, config, where)
    if len(dataset) == 0:
        raise LongbertError(f"{where}: the {kind} holds no documents")
    return dataset, kind


def _read_one_split(value: Any, config, where: str):
    pandas = sys.modules.get("pandas")  # a DataFrame means pandas is loaded already; never import it for the check
    try:
        if isinstance(value, Dataset):
            return value, "datasets.Dataset"
        if pandas is not None and isinstance(value, pandas.DataFrame):
            return Dataset.from_pandas(value, preserve_index=False), "pandas DataFrame"
        if isinstance(value, dict) and value and all(_is_sequence(v) for v in value.values()):
            columns = {str(k): list(v) for k, v in value.items()}
            sizes = {k: len(v) for k, v in columns.items()}
            if len(set(sizes.values())) > 1:
                raise LongbertError(f"{where}: the columns differ in length ({sizes})")
            return Dataset.from_dict(columns), "dict of columns"
        if isinstance(value, (list, tuple)) and value and all(isinstance(row, dict) for row in value):
            return Dataset.from_list(list(value)), "list of rows"
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(map(_is_sequence, value)):
            texts, labels = map(list, value)
            if len(texts) != len(labels):
                raise LongbertError(f"{where}: {len(texts)} texts but {len(labels)} labels")
            return Dataset.from_dict({config.text_column: texts, config.label_column: labels}), "(texts, labels) pair"
    except LongbertError:
        raise
    except Exception as error:  # pyarrow refuses mixed column types and the like
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise LongbertError(f"{where}: cannot read it as documents: {detail}") from None
    raise LongbertError(f"{where}: cannot use a {type(value).__module__}.{type(value).__qualname__}; "
                        f"pass {ACCEPTED_OBJECTS}")


def _is_sequence(value: Any) -> bool:
    """A column of values: a list, tuple, numpy array, pandas Series... (not a string, bytes or a dict)."""
    return (hasattr(value, "__len__") and hasattr(value, "__iter__")
            and not isinstance(value, (str, bytes, dict)))


def describe_data_object(obj: Any, config) -> str:
    """What data.path records for a run trained on `obj`: 'in-memory <kind> (<split>: <n> rows, ...)'."""
    splits, kind, _ = data_object_splits(obj, config)
    return describe_splits(splits, kind)


def describe_splits(splits: dict, kind: str) -> str:
    """Splits in memory (name -> rows) and their kind -> what data.path records for them."""
    return f"{IN_MEMORY}{kind} ({', '.join(f'{split}: {len(rows)} rows' for split, rows in splits.items())})"


def recipe_for_data_object(recipe, obj: Any):
    """A copy of `recipe` whose data.path says that the documents come from `obj` (see `describe_data_object`);
    `recipe` itself is left as it was."""
    data = dataclasses.replace(recipe.data, path=describe_data_object(obj, recipe.data))
    return dataclasses.replace(recipe, data=data)


def splits_by_role(train_dataset: Any, eval_dataset: Any, config) -> tuple[dict[str, Any], dict[str, Any]]:
    """`train(train_dataset=..., eval_dataset=...)`: documents in memory for the train role and, when given, the
    validation role -> (a dict of splits by name, as `data_object_splits` reads it; the data section's settings that
    name them). The split names are the data section's (data.train_split, data.validation_split or 'validation');
    without eval_dataset validation is carved from train (data.validation_fraction). No test split: the test is
    `evaluate(model, documents)`'s."""
    if train_dataset is None:
        raise LongbertError("eval_dataset needs train_dataset: the documents to train on")
    for where, given in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
        if given is not None:
            _one_split(given, config, where)  # refused here, before any stage, when it holds no documents
    splits, settings = {config.train_split: train_dataset}, {"test_split": None, "validation_split": None}
    if eval_dataset is not None:
        name = config.validation_split or "validation"
        if name == config.train_split:
            raise LongbertError(f"eval_dataset: data.validation_split and data.train_split are both {name!r}; name "
                                "the validation split otherwise")
        splits[name] = eval_dataset
        settings["validation_split"] = name
    return splits, settings
