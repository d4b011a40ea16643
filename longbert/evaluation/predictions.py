"""`PredictionRow`: one document's line in a run folder's predictions-<split>.jsonl, the record that evaluation,
training, compare's baseline and ensembles write and that compare, hybrid, ensemble and explain read. One writer
(`write_prediction_rows`, where probabilities are rounded) and one reader (`read_prediction_rows`, which loads the
files of earlier versions too: a key they lack is None, a key this version does not know is ignored).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from longbert.errors import LongbertError
from longbert.utils.atomic import json_text, write_text_atomically

PROBABILITY_DIGITS = 6  # what a predictions file keeps of each probability


@dataclass(frozen=True)
class PredictionRow:
    """One document's prediction. `label` and `predicted` are class indices (single-label) or multi-hot lists
    (multi-label); `probabilities` one per class. The rest is for people and error analysis: `id` (the dataset's id
    column, else the row index), the labels as names, and the pooler's unit weights (None where a row has none:
    TF-IDF's, an ensemble's), and for a calibrated model the probabilities before calibration (`uncalibrated`)."""

    index: int
    n_tokens: int
    label: int | list[int]
    probabilities: list[float]
    predicted: int | list[int]
    id: Any = None
    label_name: str | list[str] | None = None
    predicted_label: str | list[str] | None = None
    unit_weights: list[float] | None = None
    uncalibrated: list[float] | None = None  # the probabilities before the model's calibration, where it has one

    @property
    def combined_probabilities(self) -> list[float]:
        """What ensembles and hybrids combine: the probabilities before calibration (the combination is calibrated
        as a whole), which are `probabilities` for a row of a model without one."""
        return self.probabilities if self.uncalibrated is None else self.uncalibrated

    @property
    def right(self) -> bool:
        """Whether the prediction is the label (every label, for a multi-label row)."""
        return self.predicted == self.label

    def to_dict(self) -> dict:
        """The row as its JSON line holds it: probabilities rounded to PROBABILITY_DIGITS, the optional fields a row
        lacks left out."""
        row = dataclasses.asdict(self)
        row["probabilities"] = [round(float(p), PROBABILITY_DIGITS) for p in self.probabilities]
        if self.uncalibrated is not None:
            row["uncalibrated"] = [round(float(p), PROBABILITY_DIGITS) for p in self.uncalibrated]
        return {k: v for k, v in row.items() if v is not None or k not in OPTIONAL}

    @classmethod
    def from_dict(cls, row: dict) -> PredictionRow:
        """A row read from a file of any version (see the module's docstring)."""
        return cls(**{k: row.get(k) for k in FIELDS})


FIELDS = tuple(f.name for f in dataclasses.fields(PredictionRow))
OPTIONAL = tuple(f.name for f in dataclasses.fields(PredictionRow) if f.default is None)
REQUIRED = tuple(name for name in FIELDS if name not in OPTIONAL)


def write_prediction_rows(path: Path, rows: Iterable[PredictionRow]) -> None:
    """Write `rows` as a predictions-<split>.jsonl file, one JSON line each, atomically."""
    write_text_atomically(Path(path), "".join(json_text(row.to_dict(), f"{path}, row {row.index}") + "\n"
                                              for row in rows))


def read_prediction_rows(path: Path) -> list[PredictionRow]:
    """The rows of a predictions-<split>.jsonl file (gzipped as committed under benchmarks/results/predictions/, or
    not), blank lines skipped; a LongbertError names the file and line of a row that is not one."""
    path = Path(path)
    opened = gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")
    rows = []
    with opened as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise LongbertError(f"{path}, line {number}: not JSON ({error.msg})") from None
            missing = [k for k in REQUIRED if not isinstance(row, dict) or k not in row]
            if missing:
                raise LongbertError(f"{path}, line {number}: not a prediction row (no {', '.join(missing)})")
            problem = _row_problem(row, len(rows[0].probabilities) if rows else None)
            if problem:
                raise LongbertError(f"{path}, line {number}: {problem}")
            rows.append(PredictionRow.from_dict(row))
    return rows


def _row_problem(row: dict, classes: int | None) -> str | None:
    """What makes a row's probabilities unusable, or None: not a list of two or more finite numbers (one per class),
    another number of them than the file's first row (`classes`), or a single-label label outside them."""
    probabilities = row["probabilities"]
    if (not isinstance(probabilities, list) or len(probabilities) < 2
            or not all(isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p)
                       for p in probabilities)):
        return f"probabilities must be a list of two or more finite numbers, one per class, got {probabilities!r:.80}"
    if classes is not None and len(probabilities) != classes:
        return f"{len(probabilities)} probabilities, where the file's first row has {classes}"
    label = row["label"]
    if isinstance(label, int) and not 0 <= label < len(probabilities):
        return f"label {label} is not one of the {len(probabilities)} classes"
    return None
