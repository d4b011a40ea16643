"""Helpers of the strategies that read a document segment by segment and carry a memory from one segment to the
next (recurrence, rmt): cutting documents into segments, the step-by-step reading loop that batches the segments
of many documents, and the config checks they share. What the memory is, and how a segment reads it, is each
strategy's own: the loop only asks it for `rows`, `cut_gradient` and `join` (see `read_segments`)."""

from __future__ import annotations

from typing import Callable

import torch

from longbert.strategies.base import PassBudget, Units
from longbert.utils.hardware import trim_heap

# Streaming on the CPU: every this many steps the heap's freed pages go back to the operating system. Without it
# glibc keeps what each step frees, fragmented, and a recurrence forward over 1,048,576 tokens peaked at 2.4 GB
# (benchmarks/results/scaling.json) though what it holds alive stays flat; a trim costs about as much as a step.
TRIM_EVERY_STEPS = 32


def segment_spans(length: int, segment: int) -> list[list[tuple[int, int]]]:
    """Each segment's token range for a document of `length` tokens (one range a unit)."""
    return [[(t * segment, min(length, (t + 1) * segment))] for t in range(max(1, -(-length // segment)))]


def count_segments(documents: list[torch.Tensor], segment: int) -> list[int]:
    """Segments per document; an empty document is one empty segment."""
    return [max(1, -(-d.shape[0] // segment)) for d in documents]


def read_segments(
    documents: list[torch.Tensor],
    segment: int,
    budget: PassBudget,
    backprop_segments: int | None,
    last_only: bool,
    run_pass: Callable,
    carried_tokens: int,
) -> Units:
    """Read every document segment by segment, all documents of the batch together, carrying a memory.

    `run_pass(pieces, memory)` reads one segment of each of E documents (content pieces, the memory carried
    for those rows or None at the first segment) and returns (E, H) segment vectors and the memory to carry on
    (or (E, ...) per segment, the same shape at every step: recurrence's token states for `encode_tokens`, whose
    Units then hold (B, N, ...)).
    A memory object has `rows(start, stop)`, `cut_gradient(cut)` (detach the rows where the (E,) bool `cut` is
    True) and a static `join(parts)` (the rows of several passes, in order). `carried_tokens`: tokens each row
    carries besides its segment (for the pass budget). Returns Units (B, N, H), one unit per segment."""
    counts = count_segments(documents, segment)
    # Longest documents first: the documents still being read at step t are always the first E rows.
    order = sorted(range(len(documents)), key=lambda b: -counts[b])
    remaining = torch.tensor([counts[b] for b in order])  # (B,) segments per document, in reading order
    memory = None
    steps: list[torch.Tensor] = []
    for t in range(max(counts)):
        rows = int((remaining > t).sum())
        after = remaining[:rows] - 1 - t  # (E,) segments still to come after this one
        if memory is not None:
            memory = memory.rows(0, rows)
            if backprop_segments is not None:
                memory = memory.cut_gradient(after % (backprop_segments + 1) == backprop_segments)
        # With only the last segment pooled, a step whose segments are all out of the gradient's reach needs no graph.
        needs_graph = not last_only or backprop_segments is None or bool((after <= backprop_segments).any())
        pieces = [documents[order[i]][t * segment : (t + 1) * segment] for i in range(rows)]
        with torch.set_grad_enabled(torch.is_grad_enabled() and needs_graph):
            vectors, memory = _read_step(pieces, memory, budget, run_pass, carried_tokens)
        steps.append(vectors)  # (E, H)
        if (t + 1) % TRIM_EVERY_STEPS == 0 and not torch.is_grad_enabled() and vectors.device.type == "cpu":
            trim_heap()
    batch = len(documents)
    stacked = torch.stack([torch.cat([v, v.new_zeros((batch - v.shape[0], *v.shape[1:]))]) for v in steps],
                          1)  # (B, N, H), reading order
    inverse = torch.empty(batch, dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(batch)
    vectors = stacked[inverse.to(stacked.device)]  # (B, N, H), the caller's order
    mask = torch.arange(len(steps))[None, :] < torch.tensor(counts)[:, None]  # (B, N)
    return Units(vectors, mask.to(vectors.device))


def _read_step(pieces, memory, budget: PassBudget, run_pass: Callable, carried_tokens: int):
    """One step, in as many passes as the budget asks; returns (E, H) vectors (a copy, so that no view keeps a
    pass's hidden states alive) and the joined memory."""
    rows = len(pieces)
    width = max(p.shape[0] for p in pieces) + 2 + carried_tokens
    budget = budget.on(None)  # limits still left to the device: the CPU's (callers set them for their device)
    per_pass = max(1, min(budget.max_windows, budget.max_tokens // width))
    if per_pass >= rows:
        vectors, memory = run_pass(pieces, memory)
        return vectors.clone(), memory
    vectors, memories = [], []
    for start in range(0, rows, per_pass):
        stop = min(rows, start + per_pass)
        v, m = run_pass(pieces[start:stop], None if memory is None else memory.rows(start, stop))
        vectors.append(v)
        memories.append(m)
    return torch.cat(vectors), (None if memories[0] is None else type(memories[0]).join(memories))
