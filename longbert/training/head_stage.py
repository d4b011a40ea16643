"""`train.head_first`: linear probe, then fine-tune (Kumar et al. 2022, "Fine-Tuning can Distort Pretrained Features
and Underperform Out-of-Distribution"), in one run. The pooler and head first train alone on the frozen backbone's
cached unit vectors (frozen_head_epochs epochs); the whole model then starts from what they learned.

The stage is a step of the run's Trainer (longbert.training.trainer), not a run of its own: it trains on the run's
corpus with a copy of the run's backbone, writes the run's checkpoint (its state.json names the stage), and hands the
end-to-end stage its kept model in memory. The end-to-end stage's checkpoints carry the stage's kept pooler and head
(`start_weights`), so a run resumed there builds its model from them again.

Why: with a pooler and head that start at random, the document vector of a long document is close to the mean of
its units, and the part that decides the label (one window in sixteen) reaches the loss, and sends its gradient
back, diluted by the rest; at the budgets users have, the model does not leave chance (benchmarks/log.md says what
was measured). Over cached units the pooler and head take hundreds of steps in the time of one pass of the backbone,
and learn where to look before the backbone moves.
"""

from __future__ import annotations

import dataclasses

import torch

from longbert.config import head_epochs
from longbert.config.train_reading import ReadingConfig
from longbert.training.init_from import InitSource


def head_stage_recipe(recipe):
    """The recipe of the first stage: the same data, strategy and head, the backbone frozen (unit vectors cached
    once), frozen_head_epochs epochs. train.max_steps, train.early_stopping_patience and train.reading bound the
    end-to-end stage only: the head stage's length is frozen_head_epochs, its kept epoch the best on validation (a
    pass over cached units costs seconds, and patience 1 on a small validation split stopped Hyperpartisan's head stage
    after 2 of its 10 epochs, still at one class)."""
    head = dataclasses.replace(recipe, model=dataclasses.replace(recipe.model, finetune="frozen"),
                               train=dataclasses.replace(recipe.train, head_first=False, max_steps=None,
                                                         reading=ReadingConfig(),
                                                         early_stopping_patience=None,
                                                         frozen_head_epochs=head_epochs(recipe.train, True),
                                                         contrastive_pairs=0, self_training_documents=0))
    head.strategy = dataclasses.replace(recipe.strategy)  # its own copy: building a model resolves token_pooling
    return head


@dataclasses.dataclass(frozen=True)
class HeadStage:
    """What the head stage leaves the end-to-end stage: `start`, its kept model in memory (an InitSource the
    end-to-end model is built from), and `summary`, what metrics.json's head_stage holds of it (train_seconds,
    steps, best_validation, best_metric)."""

    start: InitSource
    summary: dict

    def start_weights(self) -> dict[str, torch.Tensor]:
        """The kept pooler and head (what the end-to-end stage's checkpoints carry to rebuild its start)."""
        return self.start.weights[1]
