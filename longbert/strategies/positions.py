"""Positions past the backbone's learned ones: bigbird reads up to `max_tokens` positions with a backbone that learned
512, so its learned absolute position table is extended (`extend_positions`), by copies (Longformer's way) or by
one slow walk through the learned rows (interpolation). See bigbird.py's docstring for what each means before and
after fine-tuning."""

from __future__ import annotations

import torch
from torch import nn

from longbert.errors import LongbertError
from longbert.strategies.configs import POSITION_SCHEMES  # noqa: F401  (named in configs.py for bigbird's settings)


def position_table(backbone: nn.Module) -> nn.Embedding:
    """The backbone's learned absolute position table, or a LongbertError: bigbird has nothing to extend in a
    backbone with relative (DeBERTa) or rotary (ModernBERT) positions."""
    table = getattr(getattr(backbone, "embeddings", None), "position_embeddings", None)
    if not isinstance(table, nn.Embedding):
        raise LongbertError(
            f"strategy bigbird extends a learned absolute position table (embeddings.position_embeddings) past "
            f"{backbone.config.max_position_embeddings} positions; {type(backbone).__name__} has none"
        )
    return table


def extend_positions(backbone: nn.Module, tokens: int, scheme: str = "copy") -> None:
    """Give the backbone learned positions for `tokens` tokens from its learned table of n positions, the first n
    unchanged. copy: new position p gets the vector of p mod n, as Longformer did for RoBERTa. interpolate: new
    positions n .. tokens-1 walk the learned table once, position n + j taking the linear interpolation at
    fractional row j * (n - 1) / (tokens - n - 1). Deterministic, and idempotent: a backbone that already has enough
    positions is left as it is. Updates `config.max_position_embeddings`, so `save_pretrained` records the new size
    and saves the whole table."""
    embeddings = backbone.embeddings
    table = position_table(backbone)
    # RoBERTa-style tables start at padding_idx + 1: rows before that are kept and never copied.
    offset = table.padding_idx + 1 if table.padding_idx is not None else 0
    needed = tokens + offset
    old_rows = table.num_embeddings
    if old_rows >= needed:
        return
    learned = old_rows - offset
    with torch.no_grad():
        if scheme == "copy":
            source = offset + torch.arange(needed - offset, device=table.weight.device) % learned  # (needed - offset,)
            weight = torch.cat([table.weight[:offset], table.weight[source]])  # (needed, H)
        else:
            new = needed - old_rows  # positions past the learned ones
            where = torch.linspace(0, learned - 1, new, device=table.weight.device, dtype=torch.float64)  # (new,)
            low = where.floor().long().clamp(max=learned - 2) if learned > 1 else where.long()
            share = (where - low).to(table.weight.dtype)[:, None]  # (new, 1)
            rows = table.weight[offset:]  # (learned, H)
            high = (low + 1).clamp(max=learned - 1)
            between = rows[low] * (1 - share) + rows[high] * share  # (new, H)
            weight = torch.cat([table.weight, between])  # (needed, H)
        extended = nn.Embedding(needed, weight.shape[1], padding_idx=table.padding_idx,
                                device=weight.device, dtype=weight.dtype)
        extended.weight.copy_(weight)
    extended.weight.requires_grad_(table.weight.requires_grad)
    embeddings.position_embeddings = extended
    # Buffers sized by the old table (position ids, default token types) grow with it.
    for name, fill in (("position_ids", None), ("token_type_ids", 0)):
        buffer = getattr(embeddings, name, None)
        if isinstance(buffer, torch.Tensor) and buffer.shape[-1] == old_rows:
            grown = torch.arange(needed, device=buffer.device) if fill is None else buffer.new_full((needed,), fill)
            persistent = name not in embeddings._non_persistent_buffers_set
            embeddings.register_buffer(name, grown.to(buffer.dtype)[None], persistent=persistent)  # (1, rows)
    backbone.config.max_position_embeddings = needed
