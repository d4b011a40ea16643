"""int8 at work: what looks inside an int8 reading (`reading_classifier`, for explain). The int8 model itself,
`Int8Model` and its quantized copy, is modeling's (longbert.modeling.int8), since the classifier's own predict runs it;
its names are importable from here too, as they were before it moved."""

from __future__ import annotations

from longbert.modeling.int8 import (  # noqa: F401  (importable from here, where they were first)
    DEFAULT_RECHECK_GAP,
    RECHECK_GAPS,
    Int8Model,
    close_calls,
    int8_recheck_gap,
    quantized_copy,
)


def reading_classifier(model, precision: str):
    """The classifier whose layers read a document when `model` predicts at `precision`, for what looks inside a
    reading (explain's units and pooling): `model.for_precision(precision)`, or for int8 its quantized copy (the
    recheck re-reads whole documents, not units)."""
    runner = model.for_precision(precision)
    return runner.quantized if isinstance(runner, Int8Model) else runner
