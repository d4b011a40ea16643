"""Local data files and folders -> datasets: csv / tsv / jsonl / json(.gz) / parquet files (one a split, or a folder of
<split>.<ext> files), aclImdb-style folders, `save_to_disk` folders; and one table of rows from any of these or a hub
id (`load_table`, what `longbert predict` reads). When a file cannot be read, the error names the file, the line and
the byte to blame, not pyarrow's traceback; so do damaged compressed data and a csv line with more fields than the
header (which pandas would read without a word, one column off). Lines are counted from 1, as editors count them.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from pathlib import Path
from typing import BinaryIO, Iterator

import datasets
import pyarrow.parquet
from datasets import Dataset, DatasetDict, load_from_disk

from longbert.config.data import FILE_KINDS, split_of
from longbert.errors import LongbertError, first_line

DELIMITERS = {"csv": ",", "tsv": "\t"}  # the kinds datasets reads with its csv loader, and their field separator
READABLE = "csv, tsv, jsonl, json(.gz) or parquet"  # what a message says longbert reads
SAVED_DATASET_FILES = ("dataset_dict.json", "state.json", "dataset_info.json")  # what save_to_disk writes
# What reading a compressed data file raises when its compressed bytes are damaged inside (not the file missing):
# a bad header or CRC (BadGzipFile), a stream cut short (EOFError), deflate data that is not deflate (zlib.error).
DAMAGED_COMPRESSION = (gzip.BadGzipFile, EOFError, zlib.error)


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


def file_kind(file: Path) -> str | None:
    """A file's kind by its name ('json', 'csv', 'tsv' or 'parquet': datasets' loader, tsv read by the csv one), or
    None when longbert does not read it."""
    name = file.name.lower()
    for suffix in sorted(FILE_KINDS, key=len, reverse=True):
        if name.endswith(suffix):
            return FILE_KINDS[suffix]
    return None


def open_binary(file: Path) -> BinaryIO:
    """A data file's bytes, decompressed when its name says it is compressed (.gz: the only compression
    FILE_KINDS accepts). Reading may raise DAMAGED_COMPRESSION."""
    return gzip.open(file, "rb") if file.name.lower().endswith(".gz") else open(file, "rb")


def csv_records(file: Path) -> Iterator[tuple[int, list[str]]]:
    """(line on which the record begins, counted from 1, its fields) for each record of a csv (or tsv) file, the
    header first, as pandas reads it: a quoted field may span lines; blank and whitespace-only lines are no record."""
    with io.TextIOWrapper(open_binary(file), encoding="utf-8-sig", errors="replace", newline="") as text:
        reader = csv.reader(text, delimiter=DELIMITERS.get(file_kind(file), ","))
        end = 0  # the line the previous record ended on
        for fields in reader:
            start, end = end + 1, reader.line_num
            if len(fields) > 1 or (fields and fields[0].strip()):
                yield start, fields


def csv_problem(file: Path) -> str | None:
    """The first record of a csv file with more fields than its header, as one line naming the file and line (pandas
    would silently make the extra leading fields the index, so every column would be read one field off), or None.
    """
    records = csv_records(file)
    header = next(records, None)
    for line, fields in records:
        if len(fields) > len(header[1]):
            return (f"{file}:{line} has {len(fields)} fields but the header (line {header[0]}) names "
                    f"{len(header[1])}; quote a field that holds a comma")
    return None


def row_lines(file: Path) -> list[int] | None:
    """The line (counted from 1) on which each row of a csv or JSON-lines file begins, in the order datasets reads
    the rows (blank lines are no row); None where rows are not lines (parquet, one JSON document)."""
    kind = file_kind(file)
    if kind in DELIMITERS:
        records = csv_records(file)
        next(records, None)  # the header
        return [line for line, _ in records]
    if kind != "json":
        return None
    numbers = []
    with open_binary(file) as stream:
        for number, line in text_lines(stream, str(file)):
            if line.strip():
                if not numbers and line.lstrip().startswith("["):  # one JSON document: its rows are not lines
                    return None
                numbers.append(number)
    return numbers


def count_rows(file: Path) -> int | None:
    """How many rows a data file holds, counted without loading it (a parquet file's metadata, a csv's records, a
    JSON-lines file's non-blank lines); None for one JSON document, or a file that cannot be read so."""
    try:
        if file_kind(file) == "parquet":
            return pyarrow.parquet.ParquetFile(file).metadata.num_rows
        lines = row_lines(file)
    except Exception:  # the loader that reads it says what is wrong, with the line to blame
        return None
    return None if lines is None else len(lines)


def is_data_file(file: Path) -> bool:
    """Whether `file` is named as a data file longbert reads through datasets (csv, tsv, jsonl, json(.gz), parquet)."""
    return file_kind(file) is not None


def split_files(folder: Path) -> dict[str, Path]:
    """The data files directly in `folder`, by the split each holds."""
    return {split_of(f): f for f in sorted(folder.iterdir()) if f.is_file() and file_kind(f)}


def load_folder_of_files(folder: Path, wanted: list[str], optional: list[str] = (), where: str = "data"):
    """A DatasetDict of the `wanted` splits (and those of `optional` that exist) from a folder of <split>.<ext> files
    of one format; a missing split or mixed formats raise a LongbertError beginning with `where`."""
    files = split_files(folder)
    wanted = wanted + [s for s in optional if s in files and s not in wanted]
    missing = [s for s in wanted if s not in files]
    if missing:
        raise LongbertError(
            f"{where}: split {missing[0]!r} not found in {folder}; "
            f"available splits: {', '.join(sorted(files)) or 'none'}"
        )
    kinds = {file_kind(files[s]) for s in wanted}
    if len(kinds) != 1:
        raise LongbertError(f"{where}: the split files in {folder} mix formats ({', '.join(sorted(kinds))})")
    return load_files(kinds.pop(), {s: files[s] for s in wanted}, where)


def load_files(kind: str, files: dict[str, Path], where: str = "data"):
    """datasets.load_dataset over local files (split -> file). When datasets cannot read them, the file and line to
    blame become one LongbertError beginning with `where` (datasets' own errors are tracebacks about pyarrow)."""
    options = {"delimiter": DELIMITERS[kind]} if kind in DELIMITERS else {}
    try:
        loaded = datasets.load_dataset("csv" if kind in DELIMITERS else kind,
                              data_files={split: str(file) for split, file in files.items()}, **options)
        for split in files:  # pyarrow's JSON reader lets bytes that are not UTF-8 through; find them now
            loaded[split].data.table.validate(full=True)
    except Exception as error:  # datasets wraps what went wrong in many kinds of exception
        for file in files.values():
            problem = file_problem(file)
            if problem:
                raise LongbertError(f"{where}: {problem}") from None
        cause = error.__cause__ or error
        detail = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise LongbertError(f"{where}: cannot read {', '.join(str(f) for f in files.values())}: {detail}") from None
    for file in files.values() if kind in DELIMITERS else ():  # pandas reads these without a word: refuse them here
        problem = csv_problem(file)
        if problem:
            raise LongbertError(f"{where}: {problem}")
    return loaded


def file_problem(file: Path) -> str | None:
    """The first thing that keeps a local data file from loading, as one line naming the file and the line (and
    byte offset): empty, not UTF-8, a line that is not a JSON object, a csv header without rows, a parquet file
    without rows, a csv line with more fields than the header, compressed data that is damaged. None when none of
    these is found. Reads the file as a stream; a JSON document (not JSON lines) is read whole."""
    kind = file_kind(file)
    if kind == "parquet":
        try:
            return None if pyarrow.parquet.ParquetFile(file).metadata.num_rows else f"{file} holds no rows"
        except Exception as error:  # pyarrow says "Parquet magic bytes not found" and the like
            return f"{file} cannot be read as parquet: {error}"
    rows = number = 0
    try:
        with open_binary(file) as stream:
            for number, line in text_lines(stream, str(file)):
                if not line.strip():
                    continue
                rows += 1
                if kind in DELIMITERS:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as line_error:
                    bad = line_error
                    if rows == 1 and line.lstrip().startswith("["):  # not JSON lines: one JSON document
                        bad = _json_document_error(file)
                        if bad is None:
                            return None
                        number = bad.lineno
                    return f"{file}:{number} is not valid JSON ({bad.msg}, column {bad.colno})"
                if not isinstance(row, dict):
                    return (f"{file}:{number} is not a JSON object "
                            f"(one object per line, e.g. {{\"text\": ..., \"label\": ...}})")
        if kind in DELIMITERS and rows > 1:
            return csv_problem(file)
    except LongbertError as error:  # not UTF-8
        return str(error)
    except DAMAGED_COMPRESSION as error:
        after = f" after line {number}" if number else ""
        return f"{file} cannot be read: {first_line(error)}; its compressed data is damaged{after}"
    except OSError as error:  # an unreadable file
        return f"{file} cannot be read: {first_line(error)}"
    if rows == 0:
        return f"{file} is empty"
    if kind in DELIMITERS and rows == 1:
        return f"{file} has a header line but no rows"
    return None


def _json_document_error(file: Path) -> json.JSONDecodeError | None:
    """Why `file` is not one JSON document (a .json file need not be JSON lines), or None when it is one."""
    with open_binary(file) as stream:
        try:
            json.loads(decode_utf8(stream.read(), str(file)))
        except json.JSONDecodeError as error:
            return error
    return None


def load_aclimdb_folder(folder: Path, wanted: list[str], label_names: list[str] | None):
    """<folder>/<split>/<label>/*.txt, one document a file; label_names picks (and orders) the label folders."""
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
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # read errors are logged too, then raised: we name them


def is_saved_dataset(folder: Path) -> bool:
    """Whether `folder` was written by datasets' save_to_disk (a Dataset or a DatasetDict)."""
    return folder.is_dir() and (
        (folder / "dataset_dict.json").is_file()
        or ((folder / "state.json").is_file() and (folder / "dataset_info.json").is_file())
    )


def load_table(source: str, split: str | None = None, where: str = "input"):
    """One table of rows (a datasets.Dataset) from `source`: a csv / tsv / jsonl / json(.gz) / parquet file, a
    save_to_disk folder, a folder of <split>.<ext> files, or a hub dataset id. `split` names the split to read where
    the source holds several (a folder of split files, a saved DatasetDict, a hub dataset); one that holds a single
    split needs none. Every problem is one LongbertError beginning with `where` and naming the source."""
    quiet_datasets()
    local = Path(source).expanduser()
    if local.is_file():
        if file_kind(local) is None:
            raise LongbertError(f"{where} {local} is not a {READABLE} file")
        if split is not None:
            raise LongbertError(f"{where} {local} is a single file; it has no split {split!r} to pick")
        return load_files(file_kind(local), {"rows": local}, where)["rows"]
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
        files = split_files(local)
        if not files:
            raise LongbertError(f"{where} {local} is a folder without {READABLE} files and "
                                "not a save_to_disk folder")
        chosen = _one_split_name(list(files), split, f"{where} {local}")
        return load_folder_of_files(local, [chosen], where=where)[chosen]
    try:
        loaded = datasets.load_dataset(source, split=split)
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
