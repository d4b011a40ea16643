"""Inference speed and peak memory against document length, for the comparison report's speed plot.

Measured once per run folder on this machine and kept there as speed-by-length.json, keyed by the machine
description and the measurement settings: a later compare on the same machine reuses it, one elsewhere measures
again."""

from __future__ import annotations

import json
from pathlib import Path

from longbert.data.lengths import LENGTH_BUCKETS, length_bucket
from longbert.evaluation.split_pass import predict_dataset
from longbert.utils.atomic import write_json
from longbert.utils.folders import SPEED_FILE
from longbert.utils.hardware import describe_machine


def measure_speed_by_length(model, test, batch_size: int, per_bucket: int) -> dict:
    """Time inference on up to `per_bucket` documents of each length bucket of the tokenized split `test`.
    Returns {bucket: {documents, mean_tokens, documents_per_second, tokens_per_second, peak_memory_mb, added_memory_mb,
    memory_kind}}: added_memory_mb is what the bucket's inference needed beyond what was in use before it (the model,
    the data), which separates strategies where the process peak does not."""
    lengths = list(test["n_tokens"])
    # One small batch first, so the first bucket does not pay for lazy initialisation.
    predict_dataset(model, test.select(range(min(2, len(test)))), batch_size, description="warming up")
    out = {}
    for _, _, bucket in LENGTH_BUCKETS:
        rows = [i for i, n in enumerate(lengths) if length_bucket(n) == bucket][:per_bucket]
        if not rows:
            out[bucket] = {"documents": 0, "mean_tokens": None, "documents_per_second": None,
                           "tokens_per_second": None, "peak_memory_mb": None, "added_memory_mb": None,
                           "memory_kind": None}
            continue
        speed = predict_dataset(model, test.select(rows), batch_size, description=f"timing {bucket}")["speed"]
        out[bucket] = {
            "documents": len(rows),
            "mean_tokens": round(sum(lengths[i] for i in rows) / len(rows), 1),
            "documents_per_second": speed["documents_per_second"],
            "tokens_per_second": speed["tokens_per_second"],
            "peak_memory_mb": speed["peak_memory_mb"],
            "added_memory_mb": speed["added_memory_mb"],
            "memory_kind": speed["memory_kind"],
        }
    return out


def _speed_key(per_bucket: int, batch_size: int) -> dict:
    # version 2: memory measured after freed memory is handed back, with added_memory_mb; older files are measured again
    return {"version": 2, "machine": describe_machine(), "documents_per_bucket": per_bucket, "batch_size": batch_size}


def cached_speed(run_dir: Path, per_bucket: int, batch_size: int) -> dict | None:
    """The buckets saved in the run folder, or None when there are none measured here with these settings."""
    path = Path(run_dir) / SPEED_FILE
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    if saved.get("key") != _speed_key(per_bucket, batch_size):
        return None  # measured elsewhere or differently: measure again
    return saved["buckets"]


def save_speed(run_dir: Path, buckets: dict, per_bucket: int, batch_size: int) -> None:
    """Keep what `measure_speed_by_length` returned in the run folder, for `cached_speed`."""
    write_json(Path(run_dir) / SPEED_FILE, {"key": _speed_key(per_bucket, batch_size), "buckets": buckets})
