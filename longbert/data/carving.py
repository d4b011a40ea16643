"""Splits carved out of others, seeded and stratified by label (multi-label: a seeded shuffle): validation out of
train where the data has no validation split (data.validation_fraction), and a single data file cut into train,
validation and test: data.test_fraction of the file is the test split, data.validation_fraction of the rest the
validation split, the rest is trained on. How a file was cut is a `FileSplit`, which training writes into the run
folder as data-split.json: the file, its sha256, the seed, the fractions and the rows of each split.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from sklearn.model_selection import train_test_split

from longbert.errors import LongbertError
from longbert.utils.folders import SPLIT_FILE

# data.test_split's default: the one name under which a single file's test split is carved (null: no test).
CARVED_TEST_SPLIT = "test"
MORE_LONG_VALIDATION_STREAM = 3  # the seeded draw of the long training documents that move into validation


@dataclass
class FileSplit:
    """How one data file was cut into the splits of a run (data-split.json). Rows are counted from 0 in the order the
    file is read (a csv's header is no row; blank lines are none)."""

    source: str  # the file, as data.path found it
    sha256: str  # of the file's bytes
    documents: int  # rows in the file
    seed: int
    test_fraction: float | None  # None: no test split was carved (data.test_split null)
    validation_fraction: float
    stratified: bool  # by label (single-label); a plain seeded shuffle for multi-label
    rows: dict[str, list[int]]  # train, validation, test -> the file's rows in that split, in increasing order
    ids: dict[str, list] | None = None  # the same, as data.id_column's values, when the file has that column

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def read(cls, folder: str | Path) -> FileSplit | None:
        """The split a run folder records, or None when its documents did not come from one file."""
        path = Path(folder) / SPLIT_FILE
        if not path.is_file():
            return None
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError) as error:
            raise LongbertError(f"{path} is damaged: {error}") from None


@dataclass
class Carved:
    """What `carve` decided: each role's rows before subsampling (validation, train, then test: the order the
    subsets are drawn in), the split each role reads, where each came from as the stats say it, and a single file's
    split (None for other data)."""

    chosen: dict[str, Any]
    sources: dict[str, str]
    described: dict[str, str]
    file_split: FileSplit | None = None


def carve(data, splits: dict, labels: dict, validation_split: str | None, seed: int, multi_label: bool,
          file: Path | None = None, names: list[str] = (), longer: Callable | None = None) -> Carved:
    """The rows of each role (see `Carved`). `file`: the single data file `splits[data.train_split]` was read from,
    out of which test (when data.test_split names one) and validation are carved; `names`: the class names, for
    its errors; `longer`: which rows of the training split pass validation's length rule (data.validation_rule),
    so that a carved validation holds enough of them (`_enough_long`). A role carved out of another split reads that
    split's rows: `splits` and `labels` get it under the role's split name."""
    train = data.train_split
    train_rows = np.arange(len(splits[train]))
    test_rows = None
    if file is not None:
        _check_enough_per_class(file, labels[train], names, multi_label, bool(data.test_split))
        if data.test_split:
            train_rows, test_rows = _draw(train_rows, labels[train], data.test_fraction, seed, multi_label,
                                          f"data.path {file}: cannot carve a test split of {data.test_fraction:g} "
                                          f"of its {len(train_rows)} documents")
    chosen = {}
    validation_name = validation_split or "validation"
    if validation_split is None:
        where = (f"data.path {file}: cannot carve a validation split from the {len(train_rows)} documents the test "
                 "split left" if file is not None else "data: cannot carve a stratified validation split from train")
        train_rows, val_rows = _draw(train_rows, labels[train], data.validation_fraction, seed, multi_label, where)
        moved = 0
        if longer is not None:
            train_rows, val_rows, moved = _enough_long(data, train_rows, val_rows, longer, seed)
        chosen["validation"] = np.sort(val_rows)
        splits[validation_name], labels[validation_name] = splits[train], labels[train]
    else:
        chosen["validation"] = np.arange(len(splits[validation_name]))
    chosen["train"] = np.sort(train_rows)
    if test_rows is not None:
        chosen["test"] = np.sort(test_rows)
        splits[data.test_split], labels[data.test_split] = splits[train], labels[train]
    elif data.test_split:
        chosen["test"] = np.arange(len(splits[data.test_split]))
    sources = {"train": train, "validation": validation_name, "test": data.test_split}
    file_split = None if file is None else _file_split(data, file, splits[train], chosen, seed, multi_label)
    described = _described(data, sources, validation_split, file, moved if validation_split is None else 0)
    return Carved(chosen, sources, described, file_split)


def _enough_long(data, train_rows, val_rows, longer: Callable, seed: int):
    """(train's rows, validation's rows, how many moved): where fewer of the carved validation's documents pass its
    length rule than it would keep in all (data.max_eval_documents included), long training documents, drawn at
    random (seeded), move into validation until it has that many, at most half of the long ones train holds, so
    that choices are made on as many documents as without the rule and training still sees long documents."""
    wanted = len(val_rows) if data.max_eval_documents is None else min(len(val_rows), data.max_eval_documents)
    missing = wanted - int(longer(val_rows).sum())
    if missing <= 0:
        return train_rows, val_rows, 0
    long_train = np.sort(train_rows)[longer(np.sort(train_rows))]
    moved = min(missing, len(long_train) // 2)
    if not moved:
        return train_rows, val_rows, 0
    picked = np.random.default_rng([seed, MORE_LONG_VALIDATION_STREAM]).choice(long_train, moved, replace=False)
    return np.setdiff1d(train_rows, picked), np.concatenate([val_rows, picked]), moved


def _draw(rows, labels: list, fraction: float, seed: int, multi_label: bool, where: str):
    """(the rest of `rows`, `fraction` of them) drawn by scikit-learn's train_test_split, stratified by label."""
    stratify = None if multi_label else np.asarray(labels)[rows]
    try:
        return train_test_split(rows, test_size=fraction, random_state=seed, stratify=stratify)
    except ValueError as error:
        raise LongbertError(f"{where}: {error}") from None


def _check_enough_per_class(file: Path, labels: list, names: list[str], multi_label: bool, with_test: bool) -> None:
    """Every class of a single file has a document for each split carved from it (train, validation and, with
    `with_test`, test); multi-label data needs as many documents in all."""
    need = 3 if with_test else 2
    splits = "train, validation and test" if with_test else "train and validation"
    if multi_label:
        if len(labels) < need:
            raise LongbertError(f"data.path {file} holds {len(labels)} document(s); carving {splits} from one file "
                                f"needs at least {need}")
        return
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=len(names))
    few = [(name, int(n)) for name, n in zip(names, counts) if n < need]
    if few:
        name, n = few[0]
        every = ", ".join(f"{c} {int(k)}" for c, k in zip(names, counts))
        raise LongbertError(f"data.path {file}: class {name!r} has {n} document{'' if n == 1 else 's'}, too few to "
                            f"carve {splits} from one file (at least {need} of each class; counts: {every}); add "
                            "documents of that class, or point data.path at a folder of <split> files")


def _described(data, sources: dict, validation_split: str | None, file: Path | None, moved: int) -> dict[str, str]:
    """Where each role's documents came from, as the stats (and the start of training) say it."""
    described = dict(sources)
    if file is not None:
        described["train"] = file.name
        described["validation"] = f"carved from {file.name} ({data.validation_fraction * 100:g}% of the rest)"
        if data.test_split:
            described["test"] = f"carved from {file.name} ({data.test_fraction * 100:g}%)"
    elif validation_split is None:
        described["validation"] = f"carved from {data.train_split} ({data.validation_fraction * 100:g}%)"
    if data.test_split and data.test_longer_than:
        described["test"] += f", documents over {data.test_longer_than} tokens"
    if moved:
        described["validation"] += f" and {moved} long documents more from train"
    if data.validation_rule():
        described["validation"] += f", documents over {data.validation_rule()} tokens"
    return described


def _file_split(data, file: Path, dataset, chosen: dict, seed: int, multi_label: bool) -> FileSplit:
    rows = {role: [int(r) for r in chosen[role]] for role in ("train", "validation", "test") if role in chosen}
    ids = None
    if data.id_column and data.id_column in dataset.column_names:
        column = list(dataset[data.id_column])
        ids = {role: [column[r] for r in picked] for role, picked in rows.items()}
    return FileSplit(source=str(file), sha256=file_sha256(file), documents=len(dataset), seed=seed,
                     test_fraction=data.test_fraction if data.test_split else None,
                     validation_fraction=data.validation_fraction, stratified=not multi_label, rows=rows, ids=ids)


def file_sha256(file: Path) -> str:
    """The sha256 of a file's bytes, read in pieces."""
    digest = hashlib.sha256()
    with open(file, "rb") as stream:
        for piece in iter(lambda: stream.read(1 << 20), b""):
            digest.update(piece)
    return digest.hexdigest()


def check_file_unchanged(folder: str | Path, what: str, reading: str | None = None) -> None:
    """A run folder made from one data file (its data-split.json records the file and its sha256) is reused only
    while that file holds the bytes it was split from: a file with rows added, removed or reordered would be cut
    again into other splits, whose test could hold documents the model trained on. Else one LongbertError, naming
    `what` is being done, the file and the run folder. Data of other forms (a folder of split files, documents in
    memory) records no file, and passes, as does a `reading` (the data.path about to be read) that is another file.
    """
    recorded = FileSplit.read(folder)
    if recorded is None or not Path(recorded.source).is_file():
        return  # a file that is gone is named by the loader, when the run reads its data
    if reading is not None and Path(reading).expanduser().resolve() != Path(recorded.source).resolve():
        return
    now = file_sha256(Path(recorded.source))
    if now != recorded.sha256:
        raise LongbertError(f"{what}: data.path {recorded.source} has changed since the run in {folder} split it "
                            f"(sha256 {recorded.sha256[:12]} in {Path(folder) / SPLIT_FILE}, {now[:12]} now), so "
                            "its train, validation and test documents would no longer be the run's; put the file "
                            "back as it was, or train a new run into another output_dir")


def check_run_data_unchanged(run_dir: str | Path, what: str) -> None:
    """`check_file_unchanged` for a run folder and each stage folder inside it (head stage, teacher)."""
    run_dir = Path(run_dir)
    if run_dir.is_dir():
        for split_file in sorted(run_dir.glob(f"**/{SPLIT_FILE}")):
            check_file_unchanged(split_file.parent, what)
