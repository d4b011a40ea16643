"""Documents in: a hub dataset id, local csv / jsonl / json(.gz) / parquet files, a `save_to_disk` folder, an
aclImdb-style folder, or an object in memory (a datasets.Dataset or DatasetDict, a pandas DataFrame, texts and labels;
see `data_object_splits`) -> the raw splits (datasets.Dataset per split) that longbert.data.documents turns into a Corpus.

Where a recipe says `data.path: imdb`, longbert looks for a local copy first, in this order:
  1. the path as given (absolute, or relative to the working directory);
  2. each folder in the environment variable LONGBERT_DATA_DIR (separated by ':'), as <dir>/imdb;
  3. ../shared/data/imdb beside the working directory and beside the longbert checkout;
and only then asks the Hugging Face hub for a dataset of that id.

A run trained on an object in memory records it in its recipe as `data.path: in-memory <kind> (<split>: <n> rows,
...)`; reading that run's data again (evaluate, compare) needs the same object, passed as `data=`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from longbert.errors import LongbertError

FILE_KINDS = {".jsonl": "json", ".json": "json", ".jsonl.gz": "json", ".json.gz": "json", ".csv": "csv",
              ".csv.gz": "csv", ".parquet": "parquet"}
IN_MEMORY = "in-memory "  # how data.path begins in the recipe of a run whose documents came from a Python object
ACCEPTED_OBJECTS = ("a datasets.Dataset or DatasetDict, a pandas DataFrame, a (texts, labels) pair, a list of row "
                    "dicts, a dict of columns, or a dict of these by split name")
SAVED_DATASET_FILES = ("dataset_dict.json", "state.json", "dataset_info.json")  # what save_to_disk writes


def decode_utf8(raw: bytes, where: str, line: int = 1, offset: int = 0) -> str:
    """Bytes -> text, or a LongbertError naming `where`, the line and the byte offset of the first bad byte.
    `line` and `offset` are where `raw` starts in its file."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad_line = line + raw.count(b"\n", 0, error.start)
        raise LongbertError(
            f"{where}:{bad_line} is not UTF-8 text (byte {offset + error.start} is {raw[error.start]:#04x}); "
            "save it as UTF-8"
        ) from None


def text_lines(stream: BinaryIO, where: str) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of a binary stream, split on '\\n' only (a trailing '\\r' is dropped;
    U+2028, form feeds and the like stay inside their line). A leading UTF-8 byte-order mark is dropped.
    Bytes that are not UTF-8 raise a LongbertError naming `where`, the line and the byte offset."""
    offset = 0
    for number, raw in enumerate(stream, 1):
        text = decode_utf8(raw, where, number, offset)
        offset += len(raw)
        if number == 1:
            text = text.removeprefix("\ufeff")
        yield number, text.removesuffix("\n").removesuffix("\r")


def data_roots() -> list[Path]:
    roots = [Path(p) for p in os.environ.get("LONGBERT_DATA_DIR", "").split(os.pathsep) if p]
    roots.append(Path.cwd().parent / "shared" / "data")
    roots.append(Path(__file__).resolve().parents[3] / "shared" / "data")  # beside the checkout
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


def is_data_file(file: Path) -> bool:
    """Whether `file` is named as a data file longbert reads through datasets (csv, jsonl, json(.gz), parquet)."""
    return _kind(file) is not None


def _split_files(folder: Path) -> dict[str, Path]:
    return {_split_of(f): f for f in sorted(folder.iterdir()) if f.is_file() and _kind(f)}


def _load_folder_of_files(folder: Path, wanted: list[str], optional: list[str] = (), where: str = "data"):
    files = _split_files(folder)
    wanted = wanted + [s for s in optional if s in files and s not in wanted]
    missing = [s for s in wanted if s not in files]
    if missing:
        raise LongbertError(
            f"{where}: split {missing[0]!r} not found in {folder}; available splits: {', '.join(sorted(files)) or 'none'}"
        )
    kinds = {_kind(files[s]) for s in wanted}
    if len(kinds) != 1:
        raise LongbertError(f"{where}: the split files in {folder} mix formats ({', '.join(sorted(kinds))})")
    return _load_files(kinds.pop(), {s: files[s] for s in wanted}, where)


def _load_files(kind: str, files: dict[str, Path], where: str = "data"):
    """datasets.load_dataset over local files (split -> file). When datasets cannot read them, the file and line to
    blame become one LongbertError beginning with `where` (datasets' own errors are tracebacks about pyarrow)."""
    from datasets import load_dataset

    try:
        loaded = load_dataset(kind, data_files={split: str(file) for split, file in files.items()})
        for split in files:  # pyarrow's JSON reader lets bytes that are not UTF-8 through; find them now
            loaded[split].data.table.validate(full=True)
        return loaded
    except Exception as error:  # datasets wraps what went wrong in many kinds of exception
        for file in files.values():
            problem = file_problem(file)
            if problem:
                raise LongbertError(f"{where}: {problem}") from None
        cause = error.__cause__ or error
        detail = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise LongbertError(f"{where}: cannot read {', '.join(str(f) for f in files.values())}: {detail}") from None


def file_problem(file: Path) -> str | None:
    """The first thing that keeps a local data file from loading, as one line naming the file and the line (and
    byte offset): empty, not UTF-8, a line that is not a JSON object, a csv header without rows, a parquet file
    without rows. None when none of these is found. Reads the file as a stream; a JSON document (not JSON lines)
    is read whole."""
    import gzip

    kind = _kind(file)
    if kind == "parquet":
        import pyarrow.parquet

        try:
            return None if pyarrow.parquet.ParquetFile(file).metadata.num_rows else f"{file} holds no rows"
        except Exception as error:  # pyarrow says "Parquet magic bytes not found" and the like
            return f"{file} cannot be read as parquet: {error}"
    opener = gzip.open if file.name.lower().endswith(".gz") else open
    rows = 0
    try:
        with opener(file, "rb") as stream:
            for number, line in text_lines(stream, str(file)):
                if not line.strip():
                    continue
                rows += 1
                if kind == "csv":
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    if rows == 1 and line.lstrip().startswith("["):  # not JSON lines: one JSON document
                        error = _json_document_error(file, opener)
                        if error is None:
                            return None
                        number = error.lineno
                    return f"{file}:{number} is not valid JSON ({error.msg}, column {error.colno})"
                if not isinstance(row, dict):
                    return f"{file}:{number} is not a JSON object (one object per line, e.g. {{\"text\": ..., \"label\": ...}})"
    except LongbertError as error:  # not UTF-8
        return str(error)
    except (OSError, EOFError) as error:  # a damaged gzip file, an unreadable file
        return f"{file} cannot be read: {error}"
    if rows == 0:
        return f"{file} is empty"
    if kind == "csv" and rows == 1:
        return f"{file} has a header line but no rows"
    return None


def _json_document_error(file: Path, opener) -> json.JSONDecodeError | None:
    """Why `file` is not one JSON document (a .json file need not be JSON lines), or None when it is one."""
    with opener(file, "rb") as stream:
        try:
            json.loads(stream.read().decode("utf-8"))
        except json.JSONDecodeError as error:
            return error
    return None


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
                texts.append(decode_utf8(file.read_bytes(), f"data: {file}"))
                labels.append(name)
        out[split] = Dataset.from_dict({"text": texts, "label": labels})
    return DatasetDict(out)


def quiet_datasets() -> None:
    """longbert reports data loading itself; datasets' own bars would bury a one-line error."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # read errors are logged too, then raised: we name them


def load_raw_splits(config, wanted: list[str], optional: list[str] = (), source: Any = None):
    """(a DatasetDict holding at least the `wanted` splits and those of `optional` that exist, the local path or
    None), from `source` (an object in memory, see `data_object_splits`) or else from wherever `config.path`
    points."""
    quiet_datasets()
    if source is not None:
        splits, kind, single = data_object_splits(source, config)
        given = _describe(splits, kind)
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
        _refuse_single_beyond_train(True, wanted, config, f"data.path {local} is a single file, which",
                                    "point data.path at a folder of <split> files")
        loaded = _load_files(_kind(local), {config.train_split: local})
    elif is_saved_dataset(local):  # before the aclImdb rule: a saved DatasetDict holds <split>/ folders too
        loaded = _load_saved_dataset(local, wanted, config)
    elif any((local / s).is_dir() for s in wanted):
        loaded = _load_aclimdb_folder(local, wanted + [s for s in optional if (local / s).is_dir()], config.label_names)
    else:
        loaded = _load_folder_of_files(local, wanted, optional)
    return _require(loaded, wanted), local


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


def load_table(source: str, split: str | None = None, where: str = "input"):
    """One table of rows (a datasets.Dataset) from `source`: a csv / jsonl / json(.gz) / parquet file, a
    save_to_disk folder, a folder of <split>.<ext> files, or a hub dataset id. `split` names the split to read where
    the source holds several (a folder of split files, a saved DatasetDict, a hub dataset); one that holds a single
    split needs none. Every problem is one LongbertError beginning with `where` and naming the source."""
    from datasets import Dataset, load_dataset, load_from_disk

    quiet_datasets()
    local = Path(source).expanduser()
    if local.is_file():
        if _kind(local) is None:
            raise LongbertError(f"{where} {local} is not a csv, jsonl, json(.gz) or parquet file")
        if split is not None:
            raise LongbertError(f"{where} {local} is a single file; it has no split {split!r} to pick")
        return _load_files(_kind(local), {"rows": local}, where)["rows"]
    if local.is_dir():
        if is_saved_dataset(local):
            try:
                loaded = load_from_disk(str(local))
            except Exception as error:  # FileNotFoundError, ArrowInvalid, ... for a damaged folder
                detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
                raise LongbertError(f"{where} {local} looks like a save_to_disk folder but cannot be loaded: "
                                    f"{detail}") from None
            if isinstance(loaded, Dataset):
                if split is not None:
                    raise LongbertError(f"{where} {local} holds one saved Dataset; it has no split {split!r} to pick")
                return loaded
            return _one_split_of(dict(loaded), split, f"{where} {local}")
        files = _split_files(local)
        if not files:
            raise LongbertError(f"{where} {local} is a folder without csv, jsonl, json(.gz) or parquet files and "
                                "not a save_to_disk folder")
        chosen = _one_split_name(list(files), split, f"{where} {local}")
        return _load_folder_of_files(local, [chosen], where=where)[chosen]
    try:
        loaded = load_dataset(source, split=split)
    except Exception as error:  # the hub raises many kinds; all mean the same to the user
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise LongbertError(f"{where} {source!r} is neither a local file or folder nor a reachable hub dataset: "
                            f"{detail}") from None
    return loaded if isinstance(loaded, Dataset) else _one_split_of(dict(loaded), None, f"{where} {source!r}")


def _one_split_name(names: list[str], split: str | None, what: str) -> str:
    if split is None:
        if len(names) == 1:
            return names[0]
        raise LongbertError(f"{what} holds several splits ({', '.join(names)}); name one with --split")
    if split not in names:
        raise LongbertError(f"{what} has no split {split!r}; its splits: {', '.join(names)}")
    return split


def _one_split_of(splits: dict, split: str | None, what: str):
    return splits[_one_split_name(list(splits), split, what)]


def is_saved_dataset(folder: Path) -> bool:
    """Whether `folder` was written by datasets' save_to_disk (a Dataset or a DatasetDict)."""
    return folder.is_dir() and (
        (folder / "dataset_dict.json").is_file()
        or ((folder / "state.json").is_file() and (folder / "dataset_info.json").is_file())
    )


def _load_saved_dataset(folder: Path, wanted: list[str], config):
    """A save_to_disk folder as a DatasetDict; a saved Dataset is the train split."""
    from datasets import Dataset, DatasetDict, load_from_disk

    try:
        loaded = load_from_disk(str(folder))
    except Exception as error:  # datasets raises FileNotFoundError, ArrowInvalid, ... for a damaged folder
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise LongbertError(f"data.path {folder} looks like a save_to_disk folder but cannot be loaded: {detail}") from None
    if isinstance(loaded, Dataset):
        _refuse_single_beyond_train(True, wanted, config, f"data.path {folder} holds one saved Dataset, which",
                                    "save a DatasetDict with those splits")
        return DatasetDict({config.train_split: loaded})
    return loaded


def data_object_splits(obj: Any, config) -> tuple[dict[str, Any], str, bool]:
    """Documents in memory -> (split name -> datasets.Dataset, what kind of object it was, whether it was a single
    split). Accepted: a datasets.DatasetDict; a dict of splits by name, each one of the following; or one split
    (the train split, `config.train_split`): a datasets.Dataset, a pandas DataFrame, a (texts, labels) pair (columns
    named by data.text_column and data.label_column), a list of row dicts, or a dict of columns (one that holds
    data.text_column). Anything else raises a LongbertError naming the accepted kinds."""
    from datasets import DatasetDict

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
    """One split in memory -> (datasets.Dataset, what kind of object it was)."""
    import sys

    from datasets import Dataset

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
    return _describe(splits, kind)


def _describe(splits: dict, kind: str) -> str:
    return f"{IN_MEMORY}{kind} ({', '.join(f'{split}: {len(rows)} rows' for split, rows in splits.items())})"


def recipe_for_data_object(recipe, obj: Any):
    """A copy of `recipe` whose data.path says that the documents come from `obj` (see `describe_data_object`);
    `recipe` itself is left as it was."""
    import dataclasses

    data = dataclasses.replace(recipe.data, path=describe_data_object(obj, recipe.data))
    return dataclasses.replace(recipe, data=data)
