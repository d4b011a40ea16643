"""BERT's masking for continued pretraining: `masking.probability` of the non-special tokens of each document are
targets; of those, `mask_fraction` become [MASK], `random_fraction` a random non-special token, the rest stay.
Every mask is drawn from a generator seeded by (seed, purpose, index) only: the masks of training batch k depend on
(seed, k), those of held-out document d on (seed, d), so a resumed run masks as an uninterrupted one and every
held-out measurement predicts the same tokens."""

from __future__ import annotations

import numpy as np
import torch

from longbert.errors import LongbertError

IGNORE = -100  # target of a token that is not predicted
TRAINING_MASKS, HELDOUT_MASKS = 1, 2  # the purposes in `seeded` keys


class Masker:
    """BERT's masking of one document's content ids, from the tokenizer's special tokens and `masking` settings."""

    def __init__(self, masking, mask_id: int, special_ids: list[int], vocab_size: int):
        self.masking, self.mask_id = masking, mask_id
        self.special = torch.tensor(sorted(set(special_ids)), dtype=torch.long)
        candidates = torch.ones(vocab_size, dtype=torch.bool)
        candidates[self.special[self.special < vocab_size]] = False
        self.candidates = candidates.nonzero().flatten()  # (V',) ids a random replacement is drawn from

    @classmethod
    def from_tokenizer(cls, tokenizer, masking) -> "Masker":
        if tokenizer.mask_token_id is None:
            raise LongbertError("the tokenizer has no [MASK] token; masked-language-model training needs one")
        return cls(masking, tokenizer.mask_token_id, tokenizer.all_special_ids, len(tokenizer))

    def __call__(self, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (T,) -> (inputs (T,) with the chosen tokens hidden, targets (T,): the original id where chosen,
        IGNORE elsewhere). Special tokens are never chosen."""
        m = self.masking
        chosen = (torch.rand(ids.shape, generator=generator) < m.probability) & ~torch.isin(ids, self.special)
        draw = torch.rand(ids.shape, generator=generator)  # which of the three fates a chosen token meets
        to_mask = chosen & (draw < m.mask_fraction)
        to_random = chosen & (draw >= m.mask_fraction) & (draw < m.mask_fraction + m.random_fraction)
        random_ids = self.candidates[torch.randint(len(self.candidates), ids.shape, generator=generator)]
        inputs = torch.where(to_mask, torch.full_like(ids, self.mask_id), ids)
        inputs = torch.where(to_random, random_ids, inputs)
        return inputs, torch.where(chosen, ids, torch.full_like(ids, IGNORE))


def seeded(*key: int) -> torch.Generator:
    """A generator whose stream depends on `key` only (seed, purpose, index)."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence(list(key)).generate_state(1)[0]))
