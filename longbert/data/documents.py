"""Documents out: whole tokenized documents (no truncation beyond the per-document cap) with integer labels, as a
Corpus of train / validation / test splits (subsampled and checked here). Where the documents come from (files,
folders, hub ids, objects in memory) is longbert.data.sources; labels are longbert.data.labels'; splits carved out of
others (validation out of train, all three out of a single file) are longbert.data.carving's.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import datasets
import numpy as np
import torch
from datasets import Dataset, load_from_disk
from datasets.fingerprint import Hasher

from longbert.data.carving import CARVED_TEST_SPLIT, FileSplit, carve
from longbert.data.labels import (
    check_classes,
    check_label_values,
    check_labels_present,
    encode_labels,
    infer_label_names,
    label_names_from,
)
from longbert.data.lengths import LONG_TOKENS
from longbert.data.sources import load_raw_splits, row_places, single_data_file
from longbert.errors import LongbertError
from longbert.utils.logs import get_logger

# Long documents reach the tokenizer in pieces of at most PIECE_CHARS characters, and no call sees more than
# BATCH_CHARS, so tokenizing stays within a bounded memory however long a document is (see tokenize_documents).
# With data.nested_train, the training subset is a prefix of one order drawn from the seed and this stream number.
NESTED_TRAIN_STREAM = 1
LONG_VALIDATION_STREAM = 2  # data.validation_longer_than's draw
PIECE_CHARS = 100_000
BATCH_CHARS = 1_000_000
CUT_BEFORE = frozenset(" \t\n\r")  # a piece ends just before one of these, where tokenizers split words anyway


@dataclass
class Corpus:
    """Tokenized splits ready for training: each a datasets.Dataset with columns text, input_ids, labels,
    n_tokens (the document's full length in WordPiece tokens with [CLS]/[SEP], before the cap). `file_split`: how a
    single data file was cut into the splits (None for other data)."""

    splits: dict[str, Any]
    label_names: list[str]
    multi_label: bool
    stats: dict[str, dict] = field(default_factory=dict)
    file_split: FileSplit | None = None

    def without(self, *roles: str) -> Corpus:
        """The same documents less those of `roles`, in a corpus of its own (its dicts are new, the splits shared), so
        that a stage that adds to its copy leaves the run's as it is."""
        return Corpus({r: s for r, s in self.splits.items() if r not in roles}, list(self.label_names),
                      self.multi_label, {r: dict(s) for r, s in self.stats.items() if r not in roles}, self.file_split)

    def summary(self) -> str:
        """One line for the start of training: documents per split, where validation came from, long documents."""
        parts = []
        for role, s in self.stats.items():
            origin = "" if s["source_split"] == role else f"{s['source_split']}, "
            parts.append(f"{s['documents']} {role} ({origin}{s['over_512']} over 512 tokens)")
        return "data: " + ", ".join(parts)


def check_text_column(dataset, column: str, split: str, place: Callable[[int], str]) -> None:
    """Every document of `split` has a text in `column` that is a string with something in it; else one LongbertError
    naming the row (`place`)."""
    if column not in dataset.column_names:
        raise LongbertError(
            f"data.text_column {column!r} not found in split {split!r}; columns: {', '.join(dataset.column_names)}; "
            "name the one that holds the texts with --set data.text_column=COLUMN"
        )
    for row, text in enumerate(dataset[column]):
        if not isinstance(text, str):
            raise LongbertError(f"data: {place(row)}: text is {_kind_of_value(text)}, not a string")
        if not text.strip():
            raise LongbertError(f"data: {place(row)}: the document is empty or whitespace-only")


def _kind_of_value(value: Any) -> str:
    if value is None:
        return "missing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({type(value).__name__})"
    return f"a {type(value).__name__}"


def text_pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """`text` as consecutive pieces of at most `size` characters. Each piece ends just before a space, tab or line
    break, where a WordPiece (BERT) tokenizer splits anyway, so tokenizing the pieces one after another gives the
    tokens of the whole text. Only a stretch of `size` characters without any of them is cut where it must be."""
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = next((i for i in range(end, start, -1) if text[i] in CUT_BEFORE), end)
        yield text[start:cut]
        start = cut
    yield text[start:]


def tokenize_documents(tokenizer, texts: list[str], cap: int) -> tuple[list[list[int]], list[int]]:
    """Whole documents -> (content ids capped at `cap`, full lengths with [CLS]/[SEP]).

    Memory stays bounded by the cap, not by the documents: long texts reach the tokenizer in pieces (see
    `text_pieces`), no call sees more than BATCH_CHARS characters, and only the first `cap` ids of a document are
    kept, while its full length is still counted."""
    ids: list[list[int]] = [[] for _ in texts]
    lengths = [2] * len(texts)  # [CLS] and [SEP]
    pieces: list[str] = []
    owners: list[int] = []  # pieces[i] is part of texts[owners[i]]

    def tokenize_pieces() -> None:
        encoded = tokenizer(pieces, add_special_tokens=False, truncation=False, verbose=False,
                            return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        for owner, piece_ids in zip(owners, encoded):
            lengths[owner] += len(piece_ids)
            room = cap - len(ids[owner])
            if room > 0:
                ids[owner].extend(piece_ids[:room])
        pieces.clear()
        owners.clear()

    queued = 0  # characters in `pieces`
    for owner, text in enumerate(texts):
        for piece in text_pieces(text, PIECE_CHARS):
            if pieces and queued + len(piece) > BATCH_CHARS:
                tokenize_pieces()
                queued = 0
            pieces.append(piece)
            owners.append(owner)
            queued += len(piece)
    if pieces:
        tokenize_pieces()
    return ids, lengths


def token_cache_folder() -> Path | None:
    """Where `tokenize_cached` keeps tokenized splits: LONGBERT_TOKEN_CACHE (`off`: no cache), else a folder in the
    datasets cache (HF_DATASETS_CACHE)."""
    setting = os.environ.get("LONGBERT_TOKEN_CACHE")
    if setting is not None:
        return None if setting.strip().lower() in ("", "0", "off", "no", "false") else Path(setting)
    return Path(datasets.config.HF_DATASETS_CACHE) / "longbert-tokens"


def tokenizer_fingerprint(tokenizer) -> str:
    """What decides a tokenizer's output: a fast tokenizer's whole definition (vocabulary, normaliser, pre-tokenizer),
    else the pickled tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return Hasher.hash([type(tokenizer).__name__, backend.to_str() if backend is not None else tokenizer])


def tokenize_cached(tokenizer, texts: list[str], cap: int) -> tuple[list[list[int]], list[int]]:
    """`tokenize_documents`, kept on disk (a datasets Arrow folder in `token_cache_folder`) under a hash of the
    tokenizer, the cap and the texts: the documents a run tokenized are not tokenized again by the next run, by
    `evaluate`, or by the other strategies of a `compare`. An entry is written whole or not at all (a rename); an
    entry that cannot be read is tokenized again."""
    folder = token_cache_folder()
    if folder is None or not texts:
        return tokenize_documents(tokenizer, texts, cap)
    entry = folder / Hasher.hash([tokenizer_fingerprint(tokenizer), cap, PIECE_CHARS, texts])
    if entry.is_dir():
        try:
            stored = load_from_disk(str(entry))
            if len(stored) == len(texts):
                return stored["input_ids"], stored["n_tokens"]
        except Exception:  # a damaged or foreign entry: tokenize again, and replace it
            pass
    ids, lengths = tokenize_documents(tokenizer, texts, cap)
    partial = folder / f".{entry.name}.{os.getpid()}"
    try:
        Dataset.from_dict({"input_ids": ids, "n_tokens": lengths}).save_to_disk(str(partial))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(partial, entry)
    except OSError:  # a read-only or full disk costs the cache, not the run
        shutil.rmtree(partial, ignore_errors=True)
    return ids, lengths


def count_cut(lengths: list[int], cap: int) -> int:
    """How many documents of these full lengths (with [CLS]/[SEP]) the per-document token cap cut."""
    return sum(n - 2 > cap for n in lengths)


def load_corpus(data, tokenizer, seed: int, multi_label: bool = False, source: Any = None,
                roles: list[str] | None = None) -> Corpus:
    """Load, check, carve, subsample and tokenize the splits a recipe names (`data`, a DataConfig), from `source`
    when given (an object in memory, see `data_object_splits`), else from data.path. With data.validation_split
    null, a split named 'validation' is the validation split when the data has one; otherwise validation is carved
    from train. With `roles` (some of train, validation, test), only those are tokenized (each holds the same
    documents as without `roles`). data.seed, when set, draws the carving and the subsets instead of `seed`. A
    single data file is cut into train, validation and test (see longbert.data.carving)."""
    seed = seed if data.seed is None else data.seed
    raw, local, wanted, validation_split, file = _load_splits(data, source)
    places = {split: row_places(local, split) for split in wanted}  # where each row is, for errors
    _check_splits(data, raw, wanted, places, multi_label)
    names = _label_names(data, raw, local, multi_label)
    splits = {s: raw[s].select_columns(_kept_columns(data, raw[s])) for s in wanted}
    labels = {s: encode_labels(list(splits[s][data.label_column]), names, multi_label, places[s]) for s in wanted}
    check_classes(labels[data.train_split], names, f"documents of split {data.train_split!r}")
    carved = carve(data, splits, labels, validation_split, seed, multi_label, file, names,
                   _length_rule(data, tokenizer, splits[data.train_split]))
    chosen, sources, described = carved.chosen, carved.sources, carved.described
    rng = np.random.default_rng(seed)
    out, stats = {}, {}
    for role, rows in chosen.items():
        split = sources[role]
        tokenized = None  # {row: (ids, length)} of a whole split tokenized to select by length
        if role == "test" and data.test_longer_than and (roles is None or role in roles):
            rows, tokenized = _longer_than(data, tokenizer, splits[split], rows, f"split {split!r}", "test")
        drawn = _subsample(data, rows, role, seed, rng)
        if role == "validation" and data.validation_rule() and (roles is None or role in roles):
            # Drawn from a generator of its own: the draw above moved `rng` as it does without the option, so the
            # test documents drawn after it stay the same and runs with and without long validation pair.
            where = (f"split {split!r}" if validation_split else
                     f"the validation carved from split {data.train_split!r}")
            rows, tokenized = _longer_than(data, tokenizer, splits[split], rows, where, "validation")
            drawn = _subsample(data, rows, role, seed, np.random.default_rng([seed, LONG_VALIDATION_STREAM]))
        rows = drawn
        if role == "train":
            check_classes([labels[split][i] for i in rows], names,
                           "training documents (after carving validation and data.max_train_documents)")
        if roles is not None and role not in roles:
            continue  # subsampled all the same, so that the roles asked for draw the same documents
        out[role], stats[role] = _role_split(data, tokenizer, splits[split], rows, labels[split], tokenized,
                                             described[role])
    _warn_of_shared_texts(out)
    return Corpus(out, list(names), multi_label, stats, carved.file_split)


def _warn_of_shared_texts(splits: dict) -> None:
    """One warning when a text of validation or test is also a training text (a document given twice): its twin is
    learnt, so its score says less than it seems."""
    if "train" not in splits:
        return
    train = set(splits["train"]["text"])
    shared = {role: sum(t in train for t in splits[role]["text"]) for role in ("validation", "test") if role in splits}
    shared = {role: n for role, n in shared.items() if n}
    if shared:
        get_logger(__name__).warning(
            "data: " + " and ".join(f"{n} {role} document{'' if n == 1 else 's'}" for role, n in shared.items())
            + " also appear word for word among the training documents (a text given twice); their scores "
            "overstate the model: remove the duplicates from the data")


def _load_splits(data, source: Any) -> tuple[dict, Any, list[str], str | None, Path | None]:
    """(raw splits, local, the splits wanted in order, the validation split or None when it is to be carved, the
    single data file its test and validation are carved from or None)."""
    wanted = [data.train_split] + [s for s in (data.validation_split, data.test_split) if s]
    file = single_data_file(data, source)
    if file is not None and data.validation_split is None and data.test_split in (None, CARVED_TEST_SPLIT):
        wanted = [data.train_split]  # the file is read as train; the rest is carved from it
    else:
        file = None  # other splits asked of one file: load_raw_splits refuses them
    optional = ["validation"] if data.validation_split is None and "validation" not in wanted else []
    raw, local = load_raw_splits(data, wanted, optional, source)
    validation_split = data.validation_split or next((s for s in optional if s in raw), None)
    if validation_split and validation_split not in wanted:
        wanted.insert(1, validation_split)
    return raw, local, wanted, validation_split, file


def _check_splits(data, raw: dict, wanted: list[str], places: dict, multi_label: bool) -> None:
    """Every wanted split has text and label columns, every text is a non-empty string, every document a label."""
    for split in wanted:
        check_text_column(raw[split], data.text_column, split, places[split])
        if data.label_column not in raw[split].column_names:
            raise LongbertError(
                f"data.label_column {data.label_column!r} not found in split {split!r}; "
                f"columns: {', '.join(raw[split].column_names)}; name the one that holds the labels with "
                "--set data.label_column=COLUMN"
            )
        check_labels_present(list(raw[split][data.label_column]), multi_label, places[split])
        check_label_values(list(raw[split][data.label_column]), places[split])


def _label_names(data, raw: dict, local: Any, multi_label: bool) -> list[str]:
    """The class names: data.label_names, else the data's own, else those found in train's labels (two at least)."""
    names = data.label_names or label_names_from(raw[data.train_split], data.label_column, local)
    if names is None:
        names = infer_label_names(list(raw[data.train_split][data.label_column]), multi_label)
    if len(names) < 2:
        raise LongbertError(f"data: need at least 2 classes, found {names}")
    return names


def _kept_columns(data, dataset) -> list[str]:
    has_ids = data.id_column and data.id_column in dataset.column_names
    return [data.text_column, data.label_column] + ([data.id_column] if has_ids else [])


def _longer_than(data, tokenizer, dataset, rows, where: str, role: str):
    """(the rows over data.<role>_longer_than tokens, {row: (ids, length)} of every one of `rows`, tokenized to find
    them); `where`: the documents `rows` are, as an error names them."""
    longer_than = data.test_longer_than if role == "test" else data.validation_rule()
    texts = list(dataset.select(rows)[data.text_column])
    tokenized = dict(zip(rows.tolist(), zip(*tokenize_cached(tokenizer, texts, data.max_document_tokens))))
    kept = np.array([r for r in rows.tolist() if tokenized[r][1] > longer_than], dtype=np.int64)
    if not len(kept):
        setting = f"data.{role}_longer_than={longer_than}"
        if role == "validation" and data.validation_longer_than is None:
            setting = (f"data.test_longer_than={longer_than}, which validation follows (data.validation_longer_than "
                       "null; 0 validates on every length)")
        raise LongbertError(f"{setting}: no document of {where} is that long (its longest has "
                            f"{max(n for _, n in tokenized.values())} tokens)")
    return kept, tokenized


def _length_rule(data, tokenizer, dataset):
    """Which of `dataset`'s rows are longer than validation's length rule (a function of an array of rows, for
    `carve`), or None where validation takes documents of any length."""
    if not data.validation_rule():
        return None

    def longer(rows):
        _, lengths = tokenize_cached(tokenizer, list(dataset.select(rows)[data.text_column]), data.max_document_tokens)
        return np.asarray(lengths) > data.validation_rule()
    return longer


def _subsample(data, rows, role: str, seed: int, rng):
    """At most the role's data.max_*_documents of `rows`, drawn with `rng` (nested training subsets: their own)."""
    limit = {"train": data.max_train_documents, "validation": data.max_eval_documents,
             "test": data.max_eval_documents if data.max_test_documents is None else data.max_test_documents}[role]
    if role == "train" and data.nested_train:  # a generator of its own: the other splits' draws stay the same
        if limit is not None and limit > len(rows):
            raise LongbertError(f"data.max_train_documents={limit}: the training split has only {len(rows)} "
                                "documents after carving validation; a learning curve's sizes must fit in it")
        return np.sort(np.random.default_rng([seed, NESTED_TRAIN_STREAM]).permutation(rows)[:limit])
    return rows if limit is None or limit >= len(rows) else np.sort(rng.choice(rows, limit, replace=False))


def _role_split(data, tokenizer, dataset, rows, labels: list, tokenized: dict | None, described: str):
    """(the tokenized Dataset of `rows` of `dataset`, its stats); `tokenized`: their ids and lengths, when known."""
    chosen_rows = dataset.select(rows)
    texts = list(chosen_rows[data.text_column])
    if tokenized is not None:
        ids, lengths = [tokenized[r][0] for r in rows.tolist()], [tokenized[r][1] for r in rows.tolist()]
    else:
        ids, lengths = tokenize_cached(tokenizer, texts, data.max_document_tokens)
    columns = {"text": texts, "input_ids": ids, "labels": [labels[i] for i in rows], "n_tokens": lengths}
    if data.id_column in chosen_rows.column_names:  # document ids travel to the prediction files
        columns["id"] = list(chosen_rows[data.id_column])
    split = Dataset.from_dict(columns)
    return split, {
        "documents": len(rows),
        "source_split": described,
        "cut_by_token_cap": count_cut(lengths, data.max_document_tokens),
        "median_tokens": int(np.median(lengths)) if lengths else 0,
        "over_512": sum(n > LONG_TOKENS for n in lengths),
    }


def length_grouped_order(lengths: list[int], batch_size: int, seed: int, group_batches: int = 50) -> list[int]:
    """A training order that batches documents of similar length: a seeded random permutation, cut into groups of
    `group_batches` batches, each group sorted by length (longest first), the batches then shuffled again (seeded)
    so that long and short batches alternate across the epoch. The same seed gives the same order (resumable); as
    transformers' group_by_length does, the grouping keeps most of the randomness of a plain shuffle."""
    generator = torch.Generator().manual_seed(seed)
    permutation = torch.randperm(len(lengths), generator=generator).tolist()
    size = batch_size * group_batches
    batches = []
    for start in range(0, len(permutation), size):
        group = sorted(permutation[start : start + size], key=lambda i: -lengths[i])
        batches += [group[k : k + batch_size] for k in range(0, len(group), batch_size)]
    full = [b for b in batches if len(b) == batch_size]
    short = [b for b in batches if len(b) < batch_size]  # only the last group can leave one: it goes last, as a
    order = torch.randperm(len(full), generator=generator).tolist()  # plain shuffle's short batch does
    return [i for k in order for i in full[k]] + [i for b in short for i in b]


def collate(rows: list[dict]) -> dict:
    """Rows of a tokenized split -> {'documents': list of (T,) LongTensors, 'labels': (B,) or (B, C)}."""
    documents = [torch.as_tensor(r["input_ids"], dtype=torch.long) for r in rows]
    first = rows[0]["labels"]
    dtype = torch.float32 if isinstance(first, list) else torch.long
    return {"documents": documents, "labels": torch.tensor([r["labels"] for r in rows], dtype=dtype)}
