"""Pretraining's model: the backbone's *ForMaskedLM, its encoder reading documents through a strategy (the strategy's
own token-level reading where it has one, plain consecutive windows of the backbone's positions otherwise), and
its MLM head predicting the masked tokens.

The MLM head. A backbone that ships without one (minilm: sentence-transformers keep only the BertModel) gets a
randomly initialised transform and bias, its decoder tied to the word embeddings (see `load_masked_lm`)."""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForMaskedLM

from longbert.config import PretrainRecipe
from longbert.errors import LongbertError
from longbert.modeling.backbone import (
    attention_implementation,
    clear_load_errors,
    enable_activation_checkpointing,
    load_tokenizer,
    quiet_transformers,
    resolve_backbone,
)
from longbert.strategies.base import EncodesTokens, SpecialTokens
from longbert.strategies.registry import build_strategy
from longbert.strategies.windows import encode_tokens_in_windows, usable_positions
from longbert.training.pretraining.masking import IGNORE

# The modules of each architecture's *ForMaskedLM that turn hidden states into vocabulary logits, in order.
MLM_HEADS = {
    "bert": ("cls",),
    "roberta": ("lm_head",),
    "xlm-roberta": ("lm_head",),
    "electra": ("generator_predictions", "generator_lm_head"),
    "albert": ("predictions",),
}


class MaskedLanguageModel(nn.Module):
    """A transformers *ForMaskedLM whose encoder reads documents through a strategy: `forward(inputs, targets)` ->
    (per-target losses (M,), their document positions (M,))."""

    def __init__(self, mlm: nn.Module, strategy: nn.Module, head_modules: tuple[str, ...], special, budget,
                 learned_positions: int):
        super().__init__()
        self.mlm, self.strategy, self.head_modules = mlm, strategy, head_modules
        self.learned_positions = learned_positions  # positions the backbone had before the strategy extended them
        self.special, self.budget = special, budget  # for the plain windows of a strategy without encode_tokens
        strategy.requires_grad_(False)  # the strategy as built; only the backbone and the head train

    @property
    def backbone(self) -> nn.Module:
        return self.mlm.base_model

    def is_backbone(self, name: str) -> bool:
        """Whether parameter `name` (of this module) is the encoder's."""
        return name.startswith(f"mlm.{self.mlm.base_model_prefix}.")

    def token_states(self, documents: list[torch.Tensor]) -> list[torch.Tensor]:
        """Content token ids per document -> the hidden states of the tokens the strategy reads, (T', H) each."""
        if isinstance(self.strategy, EncodesTokens):
            return self.strategy.encode_tokens(self.backbone, documents)
        return encode_tokens_in_windows(self.backbone, documents, usable_positions(self.backbone) - 2, self.special,
                                        self.budget)

    def forward(self, inputs: list[torch.Tensor], targets: list[torch.Tensor], backbone_grad: bool = True):
        """inputs, targets: (T,) each (see Masker). `backbone_grad` False: the backbone runs without a graph (the
        head trains alone). Returns the cross-entropy of every target the strategy reads (M,) and its document
        position (M,), [CLS] at 0."""
        device = next(self.parameters()).device
        with torch.set_grad_enabled(torch.is_grad_enabled() and backbone_grad):
            states = self.token_states([ids.to(device) for ids in inputs])  # B x (T', H)
        picked, labels, positions = [], [], []
        for state, target in zip(states, targets):
            target = target[: state.shape[0]].to(device)  # (T',): tokens past what the strategy reads are not read
            where = (target != IGNORE).nonzero().flatten()  # (m,)
            picked.append(state[where])  # (m, H)
            labels.append(target[where])
            positions.append(where + 1)
        hidden = torch.cat(picked)  # (M, H)
        for name in self.head_modules:
            hidden = getattr(self.mlm, name)(hidden)  # ... -> (M, V)
        losses = nn.functional.cross_entropy(hidden.float(), torch.cat(labels), reduction="none")  # (M,)
        return losses, torch.cat(positions)


def load_masked_lm(name: str, attention_dropout: float | None, hidden_dropout: float | None):
    """(the backbone's *ForMaskedLM, its head modules, the names of head weights the backbone did not ship)."""
    quiet_transformers()
    reference = resolve_backbone(name)
    with clear_load_errors(name, reference):
        config = AutoConfig.from_pretrained(reference, trust_remote_code=False)
        if config.model_type not in MLM_HEADS:
            raise LongbertError(f"longbert pretrain knows the masked-language-model head of "
                                f"{', '.join(MLM_HEADS)}; backbone {name!r} is a {config.model_type!r}")
        if attention_dropout is not None:
            config.attention_probs_dropout_prob = attention_dropout
        if hidden_dropout is not None:
            config.hidden_dropout_prob = hidden_dropout
        model_class = AutoModelForMaskedLM._model_mapping[type(config)]
        mlm, info = AutoModelForMaskedLM.from_pretrained(reference, config=config, trust_remote_code=False,
                                                         attn_implementation=attention_implementation(model_class),
                                                         output_loading_info=True)
    prefix = f"{mlm.base_model_prefix}."
    missing = sorted(k for k in info["missing_keys"] if not k.startswith(prefix))
    return mlm, MLM_HEADS[config.model_type], missing


def build_model(recipe: PretrainRecipe) -> tuple[MaskedLanguageModel, object, list[str], bool]:
    """(the model, the tokenizer, notes for the user, whether the MLM head started untrained)."""
    mlm, head_modules, missing = load_masked_lm(recipe.backbone.name, recipe.backbone.attention_dropout,
                                                recipe.backbone.hidden_dropout)
    tokenizer = load_tokenizer(recipe.backbone.name)
    if recipe.backbone.gradient_checkpointing:
        enable_activation_checkpointing(mlm)
    special = SpecialTokens.from_tokenizer(tokenizer)
    strategy = build_strategy(recipe.strategy, mlm.config.hidden_size, special, recipe.backbone.budget)
    learned_positions = usable_positions(mlm.base_model)
    strategy.adapt_backbone(mlm.base_model)
    notes = []
    if missing:
        notes.append(f"the MLM head started untrained: backbone {recipe.backbone.name!r} does not ship "
                     f"{', '.join(missing)}; its held-out loss at the start measures the random head, "
                     + (f"the one after train.head_steps={recipe.train.head_steps} (head alone) the backbone"
                        if recipe.train.head_steps else "and train.head_steps=0 gives it no steps of its own"))
    if not isinstance(strategy, EncodesTokens):
        notes.append(f"strategy {recipe.strategy.name} has no token-level reading (encode_tokens): pretraining "
                     f"reads plain consecutive windows of the backbone's positions")
    model = MaskedLanguageModel(mlm, strategy, head_modules, special, recipe.backbone.budget, learned_positions)
    return model, tokenizer, notes, bool(missing)
