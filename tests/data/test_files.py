"""Reading data files: damaged compressed data and csv lines with more fields than the header are one error line
naming the file (and the line), whichever command reads them: training and pretraining (load_raw_splits, through
load_corpus here) and predict (load_table)."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from longbert.config import DataConfig
from longbert.data.documents import load_corpus
from longbert.data.files import load_table
from longbert.errors import LongbertError

ROWS = [{"text": f"review number {i}: a {['good', 'bad', 'dull', 'fine'][i % 4]} film", "label": ["neg", "pos"][i % 2]}
        for i in range(400)]
JSONL = "".join(json.dumps(r) + "\n" for r in ROWS).encode()
CSV = ("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in ROWS)).encode()


def damaged_gzip(content: bytes, damage: str) -> bytes:
    """A real gzip stream of `content`, damaged: `deflate` flips bytes in the middle of the deflate data until zlib
    itself refuses them (zlib.error, e.g. invalid code lengths, not a CRC error and not a stream cut short);
    `truncated` ends it halfway; `crc` keeps the data and spoils the CRC-32 at its end."""
    packed = gzip.compress(content, mtime=0)
    if damage == "truncated":
        return packed[: len(packed) // 2]
    if damage == "crc":
        return packed[:-8] + bytes(b ^ 0xFF for b in packed[-8:-4]) + packed[-4:]
    for start in range(len(packed) // 2, len(packed) - 8):
        broken = packed[:start] + bytes(b ^ 0xFF for b in packed[start : start + 3]) + packed[start + 3 :]
        try:
            gzip.decompress(broken)
        except zlib.error:
            return broken
        except Exception:  # a CRC error or a short stream: not the damage this builds
            continue
    raise AssertionError("no byte flip made zlib refuse the data")


def test_the_damage_is_what_it_says():
    with pytest.raises(zlib.error):
        gzip.decompress(damaged_gzip(JSONL, "deflate"))
    with pytest.raises(EOFError):
        gzip.decompress(damaged_gzip(JSONL, "truncated"))
    with pytest.raises(gzip.BadGzipFile, match="CRC"):
        gzip.decompress(damaged_gzip(JSONL, "crc"))


@pytest.mark.parametrize("damage", ["deflate", "truncated", "crc"])
@pytest.mark.parametrize("name, content", [("train.jsonl.gz", JSONL), ("train.csv.gz", CSV)], ids=["jsonl", "csv"])
def test_damaged_compressed_data_is_named_by_predict(tmp_path, name, content, damage):
    (tmp_path / name).write_bytes(damaged_gzip(content, damage))
    with pytest.raises(LongbertError, match=rf"^input: .*{name} cannot be read: .*; its compressed data is damaged"):
        load_table(str(tmp_path / name))


@pytest.mark.parametrize("name, content", [("train.jsonl.gz", JSONL), ("train.csv.gz", CSV)], ids=["jsonl", "csv"])
def test_damaged_deflate_data_is_named_by_training(tmp_path, tokenizer, name, content):
    (tmp_path / name).write_bytes(damaged_gzip(content, "deflate"))
    with pytest.raises(LongbertError, match=rf"^data: .*{name} cannot be read: Error -3 while decompressing data: "
                                            r".*; its compressed data is damaged( after line \d+)?$"):
        load_corpus(DataConfig(path=str(tmp_path), test_split=None), tokenizer, seed=0)


GOOD_CSV = "".join(f"review {i} of a film,{['neg', 'pos'][i % 2]}\n" for i in range(8))


@pytest.mark.parametrize("content, line, fields", [
    ("text,label\n" + "".join(f"review {i}, a film,{['neg', 'pos'][i % 2]}\n" for i in range(8)), 2, 3),
    ("text,label\n" + GOOD_CSV + "\na fine, long film,pos\n", 11, 3),
    ('text,label\n"one\ntwo, three",neg\n' + GOOD_CSV + "x,y,z,pos\n", 12, 4),
    ("\ufefftext,label\r\n" + GOOD_CSV.replace("\n", "\r\n") + "a, b,pos\r\n", 10, 3),
], ids=["every-row", "a-later-row", "after-a-quoted-line-break", "bom-and-crlf"])
def test_a_csv_line_with_more_fields_than_the_header_is_refused(tmp_path, tokenizer, content, line, fields):
    """pandas would make the first fields the index and read every column one field off, without a word."""
    (tmp_path / "train.csv").write_text(content, newline="")
    message = rf"train.csv:{line} has {fields} fields but the header \(line 1\) names 2"
    with pytest.raises(LongbertError, match=rf"^input: .*{message}"):
        load_table(str(tmp_path / "train.csv"))
    with pytest.raises(LongbertError, match=rf"^data: .*{message}"):
        load_corpus(DataConfig(path=str(tmp_path), test_split=None), tokenizer, seed=0)


def test_quoted_commas_and_short_rows_are_read(tmp_path):
    (tmp_path / "in.csv").write_text('text,label\n"a fine, long film",pos\n"a dull one",\n')
    table = load_table(str(tmp_path / "in.csv"))
    assert table["text"] == ["a fine, long film", "a dull one"] and table.column_names == ["text", "label"]

