"""Pretraining's documents: the unlabelled texts a pretraining recipe's data section names, tokenized, split (seeded)
into training and held-out documents, and the seeded order in which training batches walk through them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from longbert.data.documents import tokenize_documents
from longbert.data.sources import load_raw_splits
from longbert.errors import LongbertError
from longbert.training.pretraining.masking import seeded


@dataclass
class PretrainData:
    train: list[np.ndarray]  # content ids per document (int32)
    heldout: list[np.ndarray]
    stats: dict

    def summary(self) -> str:
        s = self.stats
        parts = [f"{s[role]['documents']} {role} documents ({s[role]['over_512']} over 512 tokens, median "
                 f"{s[role]['median_tokens']})" for role in ("train", "heldout")]
        dropped = [f"{n} {why}" for why, n in (("empty", s["skipped_empty"]),
                                               ("shorter than data.min_tokens", s["shorter_than_min_tokens"])) if n]
        left_out = f"; left out: {', '.join(dropped)}" if dropped else ""
        return f"data: {', '.join(parts)} from split {s['split']!r}{left_out}"


def load_documents(data, tokenizer, seed: int) -> PretrainData:
    """The unlabelled documents a recipe's data section names, tokenized (capped at data.max_document_tokens), those
    shorter than data.min_tokens left out, split (seeded) into training and held-out documents and subsampled."""
    raw, _ = load_raw_splits(data, [data.split])
    table = raw[data.split]
    if data.text_column not in table.column_names:
        raise LongbertError(f"data.text_column {data.text_column!r} not found in split {data.split!r}; "
                            f"columns: {', '.join(table.column_names)}")
    texts = list(table[data.text_column])
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise LongbertError(f"data: row {row} of split {data.split!r}: text is {type(text).__name__}, not a string")
    kept_texts = [t for t in texts if t.strip()]
    ids, lengths = [], []
    for start in range(0, len(kept_texts), 2000):  # in slices, kept as int32 arrays: bounded memory
        part_ids, part_lengths = tokenize_documents(tokenizer, kept_texts[start : start + 2000],
                                                    data.max_document_tokens)
        ids += [np.asarray(d, dtype=np.int32) for d in part_ids]
        lengths += part_lengths
    long_enough = [i for i, n in enumerate(lengths) if n >= data.min_tokens]
    if len(long_enough) < 2:
        raise LongbertError(f"data: {len(long_enough)} document(s) of split {data.split!r} have at least "
                            f"data.min_tokens={data.min_tokens} tokens; training and held-out need 2 at least")
    rng = np.random.default_rng(seed)
    order = rng.permutation(long_enough)
    n_heldout = min(max(1, round(data.heldout_fraction * len(order))), len(order) - 1)
    roles = {"heldout": order[:n_heldout], "train": order[n_heldout:]}
    limits = {"heldout": data.max_heldout_documents, "train": data.max_train_documents}
    stats = {"split": data.split, "skipped_empty": len(texts) - len(kept_texts),
             "shorter_than_min_tokens": len(lengths) - len(long_enough)}
    chosen = {}
    for role, rows in roles.items():
        if limits[role] is not None and limits[role] < len(rows):
            rows = rng.choice(rows, limits[role], replace=False)
        rows = np.sort(rows)
        chosen[role] = [ids[i] for i in rows]
        full = [lengths[i] for i in rows]
        stats[role] = {"documents": len(rows), "median_tokens": int(np.median(full)),
                       "over_512": sum(n > 512 for n in full),
                       "cut_by_token_cap": sum(n - 2 > data.max_document_tokens for n in full)}
    return PretrainData(chosen["train"], chosen["heldout"], stats)


def batch_rows(n_documents: int, batch_size: int, index: int, seed: int) -> list[int]:
    """The documents of training batch `index`: the batches walk through one seeded permutation of the documents
    per epoch, one after another, so batch `index` depends on the seed and the index only."""
    rows = []
    for position in range(index * batch_size, (index + 1) * batch_size):
        epoch, offset = divmod(position, n_documents)
        rows.append(int(torch.randperm(n_documents, generator=seeded(seed, 0, epoch))[offset]))
    return rows
