"""Documents in: a hub dataset id, local csv / jsonl / json(.gz) / parquet files, or an aclImdb-style folder.
Documents out: whole tokenized documents (no truncation beyond the per-document cap) with integer labels.

Where a recipe says `data.path: imdb`, longbert looks for a local copy first, in this order:
  1. the path as given (absolute, or relative to the working directory);
  2. each folder in the environment variable LONGBERT_DATA_DIR (separated by ':'), as <dir>/imdb;
  3. ../shared/data/imdb beside the working directory and beside the longbert checkout;
and only then asks the Hugging Face hub for a dataset of that id.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from longbert.errors import LongbertError

FILE_KINDS = {".jsonl": "json", ".json": "json", ".jsonl.gz": "json", ".json.gz": "json", ".csv": "csv",
              ".csv.gz": "csv", ".parquet": "parquet"}
LENGTH_BUCKETS = ((0, 512, "<=512"), (513, 1024, "513-1024"), (1025, None, ">1024"))


def data_roots() -> list[Path]:
    roots = [Path(p) for p in os.environ.get("LONGBERT_DATA_DIR", "").split(os.pathsep) if p]
    roots.append(Path.cwd().parent / "shared" / "data")
    roots.append(Path(__file__).resolve().parent.parent.parent / "shared" / "data")
    return roots


def resolve_data_path(path: str) -> Path | None:
    """The local file or folder `path` names, or None when it must be a hub dataset id."""
    direct = Path(path).expanduser()
    if direct.exists():
        return direct
    if direct.is_absolute() or path.startswith("."):
        raise LongbertError(f"data.path {path!r} does not exist")
    for root in data_roots():
        if (root / path).exists():
            return root / path
    return None


def _kind(file: Path) -> str | None:
    name = file.name.lower()
    for suffix in sorted(FILE_KINDS, key=len, reverse=True):
        if name.endswith(suffix):
            return FILE_KINDS[suffix]
    return None


def _split_of(file: Path) -> str:
    name = file.name
    for suffix in sorted(FILE_KINDS, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return file.stem


def _load_folder_of_files(folder: Path, wanted: list[str]):
    from datasets import load_dataset

    files = {_split_of(f): f for f in sorted(folder.iterdir()) if f.is_file() and _kind(f)}
    missing = [s for s in wanted if s not in files]
    if missing:
        raise LongbertError(
            f"data: split {missing[0]!r} not found in {folder}; available splits: {', '.join(sorted(files)) or 'none'}"
        )
    kinds = {_kind(files[s]) for s in wanted}
    if len(kinds) != 1:
        raise LongbertError(f"data: the split files in {folder} mix formats ({', '.join(sorted(kinds))})")
    return load_dataset(kinds.pop(), data_files={s: str(files[s]) for s in wanted})


def _load_aclimdb_folder(folder: Path, wanted: list[str], label_names: list[str] | None):
    """<folder>/<split>/<label>/*.txt, one document a file; label_names picks (and orders) the label folders."""
    from datasets import Dataset, DatasetDict

    out = {}
    for split in wanted:
        split_dir = folder / split
        if not split_dir.is_dir():
            raise LongbertError(f"data: split folder {split_dir} not found")
        names = label_names or sorted(d.name for d in split_dir.iterdir() if d.is_dir())
        texts, labels = [], []
        for name in names:
            label_dir = split_dir / name
            if not label_dir.is_dir():
                raise LongbertError(f"data: label folder {label_dir} not found (data.label_names lists {name!r})")
            for file in sorted(label_dir.glob("*.txt")):
                texts.append(file.read_text(encoding="utf-8", errors="replace"))
                labels.append(name)
        out[split] = Dataset.from_dict({"text": texts, "label": labels})
    return DatasetDict(out)


def quiet_datasets() -> None:
    """longbert reports data loading itself; datasets' own bars would bury a one-line error."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def load_raw_splits(config, wanted: list[str]):
    """A DatasetDict holding at least the `wanted` splits, from wherever `config.path` points."""
    quiet_datasets()
    local = resolve_data_path(config.path)
    if local is None:
        from datasets import load_dataset

        try:
            loaded = load_dataset(config.path, config.hub_config)
        except Exception as error:  # the hub raises many kinds; all mean the same to the user
            raise LongbertError(
                f"data.path {config.path!r} is neither a local file or folder (looked in: "
                f"{', '.join(str(r) for r in data_roots())}) nor a reachable hub dataset: {str(error).splitlines()[0]}"
            ) from None
    elif local.is_file():
        if _kind(local) is None:
            raise LongbertError(f"data.path {local} is not a csv, jsonl, json(.gz) or parquet file")
        from datasets import load_dataset

        if wanted != [config.train_split]:
            raise LongbertError(
                f"data.path {local} is a single file, which serves as the train split only; set data.test_split "
                f"and data.validation_split to null, or point data.path at a folder of <split> files"
            )
        loaded = load_dataset(_kind(local), data_files={config.train_split: str(local)})
    elif any((local / s).is_dir() for s in wanted):
        loaded = _load_aclimdb_folder(local, wanted, config.label_names)
    else:
        loaded = _load_folder_of_files(local, wanted)
    missing = [s for s in wanted if s not in loaded]
    if missing:
        raise LongbertError(f"data: split {missing[0]!r} not found; available splits: {', '.join(loaded)}")
    return loaded, local


def _label_names_from(dataset, column: str, local: Path | None) -> list[str] | None:
    feature = dataset.features.get(column)
    names = getattr(feature, "names", None) or getattr(getattr(feature, "feature", None), "names", None)
    if names:
        return list(names)
    if local is not None:
        metadata = (local if local.is_dir() else local.parent) / "metadata.json"
        if metadata.is_file():
            names = json.loads(metadata.read_text()).get("label_names")
            if names:
                return list(names)
    return None


def label_index(value: Any, names: list[str], where: str) -> int:
    """One label value (an index or a name) -> its index in `names`, or a LongbertError naming `where`."""
    if isinstance(value, bool):
        raise LongbertError(f"{where}: label {value!r} is not an index or a label name")
    if isinstance(value, int):
        if not 0 <= value < len(names):
            raise LongbertError(f"{where}: label {value} is outside 0..{len(names) - 1} (label_names: {names})")
        return value
    if isinstance(value, str) and value in names:
        return names.index(value)
    raise LongbertError(f"{where}: label {value!r} is not one of label_names {names}")


@dataclass
class Corpus:
    """Tokenized splits ready for training: each a datasets.Dataset with columns text, input_ids, labels,
    n_tokens (the document's full length in WordPiece tokens with [CLS]/[SEP], before the cap)."""

    splits: dict[str, Any]
    label_names: list[str]
    multi_label: bool
    stats: dict[str, dict] = field(default_factory=dict)


def _check_texts(dataset, column: str, split: str) -> None:
    if column not in dataset.column_names:
        raise LongbertError(
            f"data.text_column {column!r} not found in split {split!r}; columns: {', '.join(dataset.column_names)}"
        )
    for row, text in enumerate(dataset[column]):
        if not isinstance(text, str) or not text.strip():
            raise LongbertError(f"data: document {row} of split {split!r} is empty or whitespace-only")


def _encode_labels(values: list, names: list[str], multi_label: bool, split: str) -> list:
    out = []
    for row, value in enumerate(values):
        where = f"data: row {row} of split {split!r}"
        if multi_label:
            items = value if isinstance(value, list) else [value]
            hot = [0.0] * len(names)
            for item in items:
                hot[label_index(item, names, where)] = 1.0
            out.append(hot)
        else:
            if isinstance(value, list):
                raise LongbertError(f"{where}: a list label needs model.problem_type: multi_label")
            out.append(label_index(value, names, where))
    return out


def infer_label_names(values: list, multi_label: bool) -> list[str]:
    flat = [v for value in values for v in (value if isinstance(value, list) else [value])]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
        if min(flat) < 0:
            raise LongbertError("data: negative label found (unlabelled rows?); drop them or set data.label_names")
        return [str(i) for i in range(max(flat) + 1)]
    return sorted({str(v) for v in flat})


def tokenize_documents(tokenizer, texts: list[str], cap: int) -> tuple[list[list[int]], list[int]]:
    """Whole documents -> (content ids capped at `cap`, full lengths with [CLS]/[SEP])."""
    ids = tokenizer(texts, add_special_tokens=False, truncation=False)["input_ids"]
    return [d[:cap] for d in ids], [len(d) + 2 for d in ids]


def load_corpus(data, tokenizer, seed: int, multi_label: bool = False) -> Corpus:
    """Load, check, carve, subsample and tokenize the splits a recipe names."""
    wanted = [data.train_split] + [s for s in (data.validation_split, data.test_split) if s]
    raw, local = load_raw_splits(data, wanted)
    for split in wanted:
        _check_texts(raw[split], data.text_column, split)
        if data.label_column not in raw[split].column_names:
            raise LongbertError(
                f"data.label_column {data.label_column!r} not found in split {split!r}; "
                f"columns: {', '.join(raw[split].column_names)}"
            )
    names = data.label_names or _label_names_from(raw[data.train_split], data.label_column, local)
    if names is None:
        names = infer_label_names(list(raw[data.train_split][data.label_column]), multi_label)
    if len(names) < 2:
        raise LongbertError(f"data: need at least 2 classes, found {names}")

    splits = {s: raw[s].select_columns([data.text_column, data.label_column]) for s in wanted}
    labels = {s: _encode_labels(list(splits[s][data.label_column]), names, multi_label, s) for s in wanted}

    import numpy as np

    rng = np.random.default_rng(seed)
    chosen: dict[str, np.ndarray] = {}
    train_rows = np.arange(len(splits[data.train_split]))
    validation_name = data.validation_split or "validation"
    if data.validation_split is None:
        from sklearn.model_selection import train_test_split

        stratify = None if multi_label else labels[data.train_split]
        try:
            train_rows, val_rows = train_test_split(
                train_rows, test_size=data.validation_fraction, random_state=seed, stratify=stratify
            )
        except ValueError as error:
            raise LongbertError(f"data: cannot carve a stratified validation split from train: {error}") from None
        chosen[validation_name] = np.sort(val_rows)
        splits[validation_name] = splits[data.train_split]
        labels[validation_name] = labels[data.train_split]
    else:
        chosen[validation_name] = np.arange(len(splits[validation_name]))
    chosen["train"] = np.sort(train_rows)
    if data.test_split:
        chosen["test"] = np.arange(len(splits[data.test_split]))
    sources = {"train": data.train_split, "validation": validation_name, "test": data.test_split}

    def subsample(rows: np.ndarray, limit: int | None) -> np.ndarray:
        return rows if limit is None or limit >= len(rows) else np.sort(rng.choice(rows, limit, replace=False))

    from datasets import Dataset

    out, stats = {}, {}
    for role, rows in chosen.items():
        limit = data.max_train_documents if role == "train" else data.max_eval_documents
        rows = subsample(rows, limit)
        source = sources[role]
        texts = list(splits[source].select(rows)[data.text_column])
        ids, lengths = tokenize_documents(tokenizer, texts, data.max_document_tokens)
        out[role] = Dataset.from_dict({
            "text": texts,
            "input_ids": ids,
            "labels": [labels[source][i] for i in rows],
            "n_tokens": lengths,
        })
        stats[role] = {
            "documents": len(rows),
            "source_split": source,
            "cut_by_token_cap": sum(n - 2 > data.max_document_tokens for n in lengths),
            "median_tokens": int(np.median(lengths)) if lengths else 0,
            "over_512": sum(n > 512 for n in lengths),
        }
    return Corpus(out, list(names), multi_label, stats)


def collate(rows: list[dict]) -> dict:
    """Rows of a tokenized split -> {'documents': list of (T,) LongTensors, 'labels': (B,) or (B, C)}."""
    import torch

    documents = [torch.as_tensor(r["input_ids"], dtype=torch.long) for r in rows]
    first = rows[0]["labels"]
    dtype = torch.float32 if isinstance(first, list) else torch.long
    return {"documents": documents, "labels": torch.tensor([r["labels"] for r in rows], dtype=dtype)}


def length_bucket(n_tokens: int) -> str:
    for low, high, name in LENGTH_BUCKETS:
        if n_tokens >= low and (high is None or n_tokens <= high):
            return name
    raise ValueError(n_tokens)
