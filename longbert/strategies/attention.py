"""How a strategy puts its own attention into a transformers encoder: one installer, one fallback, one mask.

bigbird (block-sparse attention) and recurrence (a memory of earlier segments) each run the backbone's
self-attention through a function of their own. `install_attention` registers it with transformers'
AttentionInterface under the strategy's name and switches the backbone (looking through a peft wrapper) to it,
after checking that the backbone can take it: an encoder whose attention goes through the AttentionInterface.

What the special attention needs (bigbird's plan, recurrence's step state) travels as one keyword argument that
the strategy passes through `backbone(...)` on each call, so the mode is an argument of the call, never state held
by the backbone. A call without it (bigbird's short documents, any other caller of the backbone) is ordinary sdpa
attention: the same fallback, `plain_attention`, for every strategy.

The mask function registered alongside, `key_padding_mask`, keeps the (W, 1, 1, L) key-padding mask as it is
instead of expanding it to (W, 1, L, L): the special attention reads its own masks from its argument, and the
fallback only needs to know which keys are padding.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface

from longbert.errors import LongbertError


def base_model(backbone: nn.Module) -> nn.Module:
    """The transformers model inside a peft wrapper (or the backbone itself)."""
    return backbone.get_base_model() if hasattr(backbone, "get_base_model") else backbone


def layer_head_weight(current: nn.Parameter | None, backbone: nn.Module, extra: tuple[int, ...],
                      start: float) -> nn.Parameter:
    """A strategy weight with one entry per layer and attention head of `backbone`, shape (layers, heads, *extra),
    starting at `start` everywhere; `current` where it already has that shape (adapt_backbone called again, e.g.
    after loading a saved model)."""
    settings = base_model(backbone).config
    shape = (settings.num_hidden_layers, settings.num_attention_heads, *extra)
    if current is not None and tuple(current.shape) == shape:
        return current
    return nn.Parameter(torch.full(shape, float(start)))


def key_padding_mask(batch_size: int, q_length: int, kv_length: int, attention_mask: torch.Tensor | None = None,
                     **kwargs) -> torch.Tensor | None:
    """transformers mask function: the key-padding mask as (W, 1, 1, L) bool, or None when nothing is padded.
    Never expanded to (W, 1, L, L)."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    return attention_mask[:, None, None, :kv_length].bool()


def plain_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                    **kwargs) -> tuple[torch.Tensor, None]:
    """Ordinary full attention, through transformers' sdpa function: query/key/value (W, A, L, D) and the mask
    from `key_padding_mask` -> output (W, L, A, D), no weights."""
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  **kwargs)


def with_fallback(argument: str, attend: Callable) -> Callable:
    """The function registered with AttentionInterface: `attend(module, query, key, value, given, dropout=...,
    scaling=...)` -> (W, L, A, D) when the call carries the keyword `argument` (`given` is its value),
    `plain_attention` otherwise."""

    def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
        given = kwargs.pop(argument, None)
        if given is None:
            return plain_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                   **kwargs)
        return attend(module, query, key, value, given, dropout=dropout, scaling=scaling), None

    return attention


def install_attention(backbone: nn.Module, strategy: str, name: str, argument: str, attend: Callable,
                      per_layer: bool = False) -> nn.Module:
    """Route the self-attention of `backbone` (a transformers encoder, or a peft wrapper around one) through
    `attend`, registered as attn_implementation `name`; see `with_fallback` for `argument` and `attend`.
    `per_layer`: `attend` keeps state per layer, so every layer's attention must know its index (`layer_idx`).
    Idempotent. Returns the transformers model whose attention was switched. Raises a LongbertError naming
    `strategy` when the backbone is a decoder, does not route attention through the AttentionInterface, has
    sliding-window (local) attention layers (the installed function attends globally), lacks layer indices that
    `per_layer` needs, or does not take the switch."""
    model = base_model(backbone)
    kind = type(model).__name__
    if getattr(model.config, "is_decoder", False):
        raise LongbertError(f"strategy {strategy} needs an encoder backbone; this {kind} is configured as a decoder")
    if not getattr(model, "_supports_attention_backend", False):
        raise LongbertError(f"strategy {strategy} needs a backbone whose attention goes through transformers' "
                            f"AttentionInterface; {kind} does not")
    if "sliding_attention" in (getattr(model.config, "layer_types", None) or []):
        raise LongbertError(f"strategy {strategy} replaces every layer's attention with a global one; {kind} has "
                            f"sliding-window (local) attention layers, which would become global")
    if per_layer and not has_layer_indices(model):
        raise LongbertError(f"strategy {strategy} keeps state per layer, so it needs attention modules that know "
                            f"their layer index (layer_idx, one per layer); {kind}'s do not")
    AttentionInterface.register(name, with_fallback(argument, attend))
    AttentionMaskInterface.register(name, key_padding_mask)
    if model.config._attn_implementation != name:
        model.set_attn_implementation(name)
    if model.config._attn_implementation != name:
        raise LongbertError(f"strategy {strategy} could not switch the attention of {kind} to {name!r} "
                            f"(it stayed {model.config._attn_implementation!r})")
    return model


def has_layer_indices(model: nn.Module) -> bool:
    """Whether the modules of `model` carry layer indices (`layer_idx`) 0 .. num_hidden_layers - 1, one per layer:
    not where layers share their weights (ALBERT) or do not number their attention (DistilBERT)."""
    indices = {getattr(m, "layer_idx", None) for m in model.modules()} - {None}
    return indices == set(range(model.config.num_hidden_layers))
