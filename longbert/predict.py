"""Reading texts for `longbert predict` and writing its JSON lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from longbert.errors import LongbertError


def read_texts(source: str) -> list[str]:
    """'-' -> stdin lines; *.jsonl -> the 'text' field of each line; anything else -> one text per line.
    Blank lines are skipped in line formats; an empty result is an error."""
    if source == "-":
        lines = sys.stdin.read().splitlines()
        where = "stdin"
    else:
        path = Path(source)
        if not path.is_file():
            raise LongbertError(f"input file not found: {path}")
        lines = path.read_text(encoding="utf-8").splitlines()
        where = str(path)
        if path.suffix == ".jsonl":
            texts = []
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    raise LongbertError(f"{path}:{number} is not valid JSON") from None
                if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                    raise LongbertError(f"{path}:{number} has no string field 'text'")
                if not row["text"].strip():
                    raise LongbertError(f"{path}:{number}: the text is empty or whitespace-only")
                texts.append(row["text"])
            if not texts:
                raise LongbertError(f"{path} holds no texts")
            return texts
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise LongbertError(f"{where} holds no texts")
    return texts


def write_jsonl(rows: list[dict], output: Path | None) -> None:
    text = "".join(json.dumps(row) + "\n" for row in rows)
    if output is None:
        sys.stdout.write(text)
        return
    from longbert.atomic import write_text_atomically

    write_text_atomically(output, text)
