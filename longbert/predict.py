"""`longbert predict`: reading the texts, running a saved model over them, and writing its JSON lines.

Every input problem is found before the model loads: a missing input file, a line that is not UTF-8 or not JSON,
an output folder that does not exist. Lines are split on '\\n' only (a trailing '\\r' is dropped), so a text holding
U+2028 or a form feed stays one text.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from longbert.data import count_cut
from longbert.sources import text_lines
from longbert.errors import LongbertError


@dataclass
class Prediction:
    """What `predict_file` did: one row per text, and how many texts the token cap cut."""

    rows: list[dict]
    cut: int
    cap: int

    def cut_message(self) -> str | None:
        """The line that says how many texts were cut, or None when none was."""
        if not self.cut:
            return None
        return f"{self.cut} of {len(self.rows)} documents were cut at max_document_tokens={self.cap}"


def read_texts(source: str) -> list[str]:
    """'-' -> stdin lines; *.jsonl -> the 'text' field of each line; anything else -> one text per line.
    Blank lines are skipped; an empty result is an error, and so is a line that is not UTF-8 (or, in *.jsonl,
    not a JSON object with a non-empty string 'text'), named by its line number."""
    if source == "-":
        return _texts(text_lines(sys.stdin.buffer, "stdin"), "stdin", jsonl=False)
    path = Path(source)
    if path.is_dir():
        raise LongbertError(f"input {path} is a folder; give a .txt or .jsonl file, or - for stdin")
    if not path.is_file():
        raise LongbertError(f"input file not found: {path}")
    with open(path, "rb") as stream:
        return _texts(text_lines(stream, str(path)), str(path), jsonl=path.suffix == ".jsonl")


def _texts(lines: Iterator[tuple[int, str]], where: str, jsonl: bool) -> list[str]:
    texts = []
    for number, line in lines:
        if not line.strip():
            continue
        if not jsonl:
            texts.append(line)
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise LongbertError(f"{where}:{number} is not valid JSON ({error.msg}, column {error.colno})") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise LongbertError(f"{where}:{number} has no string field 'text'")
        if not row["text"].strip():
            raise LongbertError(f"{where}:{number}: the text is empty or whitespace-only")
        texts.append(row["text"])
    if not texts:
        raise LongbertError(f"{where} holds no texts")
    return texts


def check_output(output: Path | None) -> None:
    """Refuse an output path that cannot be written, before any work is done."""
    if output is None:
        return
    if output.is_dir():
        raise LongbertError(f"--output {output} is a folder; name a file in it")
    if not output.parent.is_dir():
        raise LongbertError(f"--output {output}: the folder {output.parent} does not exist")


def predict_file(model_dir: str | Path, source: str, output: Path | None = None, batch_size: int = 16) -> Prediction:
    """Predict a label for each text of `source` (see `read_texts`) with the model in `model_dir` (a run folder or a
    saved model folder), and write one JSON line per text to `output` (None: stdout). Inputs and the output path
    are checked before the model loads; the output file appears whole or not at all."""
    from longbert.model import LongDocumentClassifier

    if batch_size < 1:
        raise LongbertError(f"--batch-size must be >= 1, got {batch_size}")
    check_output(output)
    texts = read_texts(source)
    model = LongDocumentClassifier.from_pretrained(model_dir)
    rows = model.predict(texts, batch_size=batch_size)
    write_jsonl(rows, output)
    cap = model.settings.max_document_tokens
    return Prediction(rows, count_cut([row["n_tokens"] for row in rows], cap), cap)


def write_jsonl(rows: list[dict], output: Path | None) -> None:
    text = "".join(json.dumps(row) + "\n" for row in rows)
    if output is None:
        sys.stdout.write(text)
        return
    from longbert.atomic import write_text_atomically

    write_text_atomically(output, text)
