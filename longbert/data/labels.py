"""Labels: class names (given, read from the data's features or a folder's metadata.json, or inferred from the
training labels), each document's label checked and encoded as a class index (or a multi-hot row for multi-label),
and the check that training sees at least two classes. Every error names the document's file and line (see
longbert.data.sources.row_places).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from longbert.errors import LongbertError


def label_names_from(dataset, column: str, local: Path | None) -> list[str] | None:
    """The class names the data itself declares: a ClassLabel feature's, or those a data folder's metadata.json
    gives its `label` field; None when it declares none."""
    feature = dataset.features.get(column)
    names = getattr(feature, "names", None) or getattr(getattr(feature, "feature", None), "names", None)
    if names:
        return list(names)
    if local is not None and column == "label":  # a data folder's metadata.json names the classes of its `label` field
        metadata = (local if local.is_dir() else local.parent) / "metadata.json"
        if metadata.is_file():
            names = json.loads(metadata.read_text()).get("label_names")
            if names:
                return list(names)
    return None


def whole(value: Any) -> Any:
    """A label read as a whole float (JSON's 1.0; pandas reads an integer column holding an empty field as floats)
    -> the integer it holds; any other value as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def infer_label_names(values: list, multi_label: bool) -> list[str]:
    """Class names from the training labels: integers 0..C-1 are indices (names "0".."C-1"); other integers (star
    ratings 1..10, say) are names themselves, in numeric order, so no empty class is made; strings sort."""
    if any(map(is_missing, values)):  # never a class named 'None' or 'nan'
        raise LongbertError("data: a label is missing (null); every document needs one")
    flat = [whole(v) for value in values for v in (value if isinstance(value, list) else [value])]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
        if min(flat) < 0:
            raise LongbertError("data: negative label found (unlabelled rows?); drop them or set data.label_names")
        distinct = sorted(set(flat))
        return [str(i) for i in (range(max(flat) + 1) if distinct == list(range(len(distinct))) else distinct)]
    return sorted({str(v) for v in flat})


def integer_names(names: list[str]) -> bool:
    """Whether class names are integers other than the indices 0..C-1 (then an integer label is a name)."""
    return all(n.lstrip("-").isdigit() for n in names) and names != [str(i) for i in range(len(names))]


def is_missing(label: Any) -> bool:
    """A null label (None; NaN where pandas read a csv with an empty label field), alone or inside a label list."""
    return any(v is None or (isinstance(v, float) and v != v) for v in (label if isinstance(label, list) else [label]))


def check_labels_present(values: list, multi_label: bool, place: Callable[[int], str]) -> None:
    """Refuse the first missing label of a split, naming its place: a document without a label cannot be learnt
    from or scored, and inferring the class names must never see one (it would become a class named 'None')."""
    row = next((row for row, value in enumerate(values) if is_missing(value)), None)
    if row is not None:
        none = " (an empty list [] says it has none)" if multi_label else ""
        raise LongbertError(f"data: {place(row)}: the label is missing (null); every document needs one{none}")


def label_index(value: Any, names: list[str], where: str) -> int:
    """One label value (an index or a name) -> its index in `names`, or a LongbertError naming `where`."""
    if is_missing(value):
        raise LongbertError(f"{where}: the label is missing (null)")
    value = whole(value)
    if isinstance(value, bool):
        raise LongbertError(f"{where}: label {value!r} is not an index or a label name")
    if isinstance(value, int):
        if integer_names(names):  # e.g. star ratings 1..4, 7..10: the integer is the class's name, not its index
            if str(value) not in names:
                raise LongbertError(f"{where}: label {value} is not one of label_names {names}")
            return names.index(str(value))
        if not 0 <= value < len(names):
            raise LongbertError(f"{where}: label {value} is outside 0..{len(names) - 1} (label_names: {names})")
        return value
    if isinstance(value, str) and value in names:
        return names.index(value)
    raise LongbertError(f"{where}: label {value!r} is not one of label_names {names}")


def encode_labels(values: list, names: list[str], multi_label: bool, place: Callable[[int], str]) -> list:
    """A split's label values -> class indices, or multi-hot rows (C floats each) for multi-label; `place` says
    where a row is, for the error a bad label raises (see longbert.data.sources.row_places)."""
    out = []
    for row, value in enumerate(values):
        where = f"data: {place(row)}"
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


def check_classes(labels: list, names: list[str], documents: str) -> None:
    """Training needs documents of at least two classes (two label sets, for multi-label)."""
    distinct = {tuple(v) if isinstance(v, list) else v for v in labels}
    if len(distinct) > 1:
        return
    if not distinct:
        raise LongbertError(f"data: there are no {documents}")
    (only,) = distinct
    what = (f"the labels {[n for n, hot in zip(names, only) if hot]}" if isinstance(only, tuple)
            else f"label {names[only]!r}")
    raise LongbertError(f"data: all {len(labels)} {documents} have {what}; training needs at least 2 classes")


def _is_number(value: Any) -> bool:
    value = whole(value)
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str)
                                                                        and value.strip().lstrip("-").isdigit())


def check_label_values(values: list, place: Callable[[int], str]) -> None:
    """Labels read as given: one kind per split (class names, or integers: indexes or numeric names, not both), and
    no label with spaces around it (`'pos '` would be a class of its own beside `'pos'`). Else one LongbertError
    naming the rows."""
    first = {}  # kind -> (row, value) of its first label
    for row, value in enumerate(values):
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item != item.strip():
                raise LongbertError(f"data: {place(row)}: label {item!r} has spaces around it; write it as "
                                    f"{item.strip()!r}, as the other labels of its class are")
            if isinstance(item, float) and not is_missing(item) and not item.is_integer():
                raise LongbertError(f"data: {place(row)}: label {item!r} is not a whole number; a label is a class "
                                    "name or a class index (0, 1, ...)")
            if isinstance(whole(item), (str, int)) and not isinstance(item, bool):
                first.setdefault("number" if _is_number(item) else "name", (row, item))
    if len(first) > 1:
        (number_row, number), (name_row, name) = first["number"], first["name"]
        raise LongbertError(f"data: the labels mix class names and numbers ({place(name_row)}: {name!r}; "
                            f"{place(number_row)}: {number!r}); give every document its label one way, names or "
                            "numbers, so that each class is one label")
