"""Where a recipe's documents come from: `data.path` resolved to a local file or folder, a hub dataset id, or an
object in memory -> the raw splits (datasets.Dataset per split) that longbert.data.documents turns into a Corpus.
Reading local files is longbert.data.files'; objects in memory are longbert.data.objects'.

Where a recipe says `data.path: imdb`, longbert looks for a local copy first, in this order:
  1. the path as given (absolute, or relative to the working directory);
  2. each folder in the environment variable LONGBERT_DATA_DIR (separated by ':'), as <dir>/imdb;
  3. ../shared/data/imdb beside the working directory and beside the longbert checkout;
and only then asks the Hugging Face hub for a dataset of that id.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

from longbert.data.files import (
    DAMAGED_COMPRESSION,
    READABLE,
    file_kind,
    is_saved_dataset,
    load_aclimdb_folder,
    load_files,
    load_folder_of_files,
    quiet_datasets,
    row_lines,
    split_files,
)
from longbert.data.objects import IN_MEMORY, data_object_splits, describe_splits
from longbert.errors import LongbertError


def data_roots() -> list[Path]:
    """The folders where a data.path given by name is looked for, in order (see the module docstring)."""
    roots = [Path(p) for p in os.environ.get("LONGBERT_DATA_DIR", "").split(os.pathsep) if p]
    roots.append(Path.cwd().parent / "shared" / "data")
    roots.append(Path(__file__).resolve().parents[3] / "shared" / "data")  # beside the checkout
    return roots


def resolve_data_path(path: str) -> Path | None:
    """The local file or folder `path` names, or None when it must be a hub dataset id."""
    direct = Path(path).expanduser()
    if direct.exists():
        if not (direct.is_file() or direct.is_dir()):
            raise LongbertError(f"data.path {path!r} is neither a file nor a folder (a pipe, socket or device); "
                                "save the documents to a file and point data.path at it")
        return direct
    if direct.is_absolute() or path.startswith("."):
        raise LongbertError(f"data.path {path!r} does not exist")
    for root in data_roots():
        if (root / path).exists():
            return root / path
    return None


def load_raw_splits(config, wanted: list[str], optional: list[str] = (), source: Any = None):
    """(a DatasetDict holding at least the `wanted` splits and those of `optional` that exist, the local path or
    None), from `source` (an object in memory, see `data_object_splits`) or else from wherever `config.path`
    points."""
    quiet_datasets()
    if source is not None:
        splits, kind, single = data_object_splits(source, config)
        given = describe_splits(splits, kind)
        if config.path.startswith(IN_MEMORY) and config.path != given:
            raise LongbertError(f"data: the object given is an {given}, but this run was trained on an {config.path}")
        _refuse_single_beyond_train(single, wanted, config, f"data: a single {kind}, which",
                                    "pass a dict of splits, e.g. {'train': ..., 'test': ...}")
        return _require(splits, wanted), None
    if config.path.startswith(IN_MEMORY):
        raise LongbertError(
            f"data.path: this run's documents came from an {config.path}; pass the same object again as data= "
            "(e.g. longbert.evaluate(run_dir, split, data=obj))"
        )
    local = resolve_data_path(config.path)
    if local is None:
        try:
            loaded = load_dataset(config.path, config.hub_config)
        except Exception as error:  # the hub raises many kinds; all mean the same to the user
            raise LongbertError(
                f"data.path {config.path!r} is neither a local file or folder (looked in: "
                f"{', '.join(str(r) for r in data_roots())}) nor a reachable hub dataset: {str(error).splitlines()[0]}"
            ) from None
    elif local.is_file():
        if file_kind(local) is None:
            raise LongbertError(f"data.path {local} is not a {READABLE} file")
        if wanted != [config.train_split]:
            raise LongbertError(
                f"data.path {local} is a single file, which holds one split: its test and validation splits are "
                "carved from it while data.test_split is test (or null: no test) and data.validation_split is null; "
                f"set them so, or point data.path at a folder of <split> files (asked for: {', '.join(wanted)})"
            )
        loaded = load_files(file_kind(local), {config.train_split: local})
    elif is_saved_dataset(local):  # before the aclImdb rule: a saved DatasetDict holds <split>/ folders too
        loaded = _load_saved_dataset(local, wanted, config)
    elif any((local / s).is_dir() for s in wanted):
        loaded = load_aclimdb_folder(local, wanted + [s for s in optional if (local / s).is_dir()], config.label_names)
    else:
        loaded = load_folder_of_files(local, wanted, optional)
    return _require(loaded, wanted), local


def single_data_file(config, source: Any = None) -> Path | None:
    """The local file data.path names when a recipe's documents come from one file (not from an object in memory,
    a folder or the hub), else None."""
    if source is not None or config.path.startswith(IN_MEMORY):
        return None
    local = resolve_data_path(config.path)
    return local if local is not None and local.is_file() else None


def row_places(local: Path | None, split: str) -> Callable[[int], str]:
    """For error messages about the rows of `split` as `load_raw_splits` read it from `local` (its second result):
    a function of a row's index (from 0, as datasets counts) -> where a user finds that row, counted from 1 as
    editors count: 'FILE:LINE' for a csv or JSON-lines file (a csv's header is line 1), 'FILE row N' for a file
    whose rows are not lines (parquet, one JSON document), 'row N of split S' for a saved dataset, an aclImdb
    folder, a hub dataset or an object in memory. The file is read again only when a place is asked for."""
    file = None
    if local is not None and local.is_file():
        file = local
    elif local is not None and not is_saved_dataset(local) and not (local / split).is_dir():
        file = split_files(local).get(split)
    lines: list = []  # row_lines(file), read at the first place asked for

    def place(row: int) -> str:
        if file is None:
            return f"row {row + 1} of split {split!r}"
        if not lines:
            try:
                lines.append(row_lines(file))
            except (LongbertError, OSError, *DAMAGED_COMPRESSION):  # changed since it loaded: count rows instead
                lines.append(None)
        return f"{file}:{lines[0][row]}" if lines[0] and row < len(lines[0]) else f"{file} row {row + 1}"

    return place


def _require(loaded, wanted: list[str]):
    missing = [s for s in wanted if s not in loaded]
    if missing:
        raise LongbertError(f"data: split {missing[0]!r} not found; available splits: {', '.join(loaded)}")
    return loaded


def _refuse_single_beyond_train(single: bool, wanted: list[str], config, what: str, instead: str) -> None:
    if single and wanted != [config.train_split]:
        raise LongbertError(
            f"{what} serves as the train split only; set data.test_split and data.validation_split to null, "
            f"or {instead}"
        )


def _load_saved_dataset(folder: Path, wanted: list[str], config):
    """A save_to_disk folder as a DatasetDict; a saved Dataset is the train split."""
    try:
        loaded = load_from_disk(str(folder))
    except Exception as error:  # datasets raises FileNotFoundError, ArrowInvalid, ... for a damaged folder
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise LongbertError(f"data.path {folder} looks like a save_to_disk folder but cannot be loaded: "
                            f"{detail}") from None
    if isinstance(loaded, Dataset):
        _refuse_single_beyond_train(True, wanted, config, f"data.path {folder} holds one saved Dataset, which",
                                    "save a DatasetDict with those splits")
        return DatasetDict({config.train_split: loaded})
    return loaded
