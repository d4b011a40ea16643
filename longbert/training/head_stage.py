"""`train.head_first`: linear probe, then fine-tune (Kumar et al. 2022, "Fine-Tuning can Distort Pretrained Features
and Underperform Out-of-Distribution"), in one run. The pooler and head first train alone on the frozen backbone's
cached unit vectors (a frozen run of the same recipe in run_dir/head_stage, frozen_head_epochs epochs); the whole
model then starts from what they learned (`train.init_from` on that folder).

Why: with a pooler and head that start at random, the document vector of a long document is close to the mean of
its units, and the part that decides the label (one window in sixteen) reaches the loss, and sends its gradient
back, diluted by the rest; at the budgets users have, the model does not leave chance (benchmarks/log.md says what
was measured). Over cached units the pooler and head take hundreds of steps in the time of one pass of the backbone,
and learn where to look before the backbone moves.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from longbert.config import head_epochs
from longbert.config.reading import ReadingConfig
from longbert.training.checkpoint import is_finished
from longbert.training.init_from import open_init_from
from longbert.training.run_record import RunMetrics, read_run_metrics
from longbert.training.start_or_resume import open_run
from longbert.utils.folders import CHECKPOINT, HEAD_STAGE, METRICS_FILE
from longbert.utils.logs import get_logger


def head_stage_recipe(recipe, run_dir: Path):
    """The recipe of the first stage: the same data, strategy and head, the backbone frozen (unit vectors cached
    once), frozen_head_epochs epochs, written to run_dir/head_stage; no test split (the test measures the finished
    model). train.max_steps, train.early_stopping_patience and train.reading bound the end-to-end stage only: the
    head stage's length is frozen_head_epochs, its kept epoch the best on validation (a pass over cached units costs
    seconds, and patience 1 on a small validation split stopped Hyperpartisan's head stage after 2 of its 10 epochs,
    still at one class)."""
    head = dataclasses.replace(recipe, output_dir=str(run_dir / HEAD_STAGE),
                               model=dataclasses.replace(recipe.model, finetune="frozen"),
                               train=dataclasses.replace(recipe.train, head_first=False, max_steps=None,
                                                         reading=ReadingConfig(),
                                                         early_stopping_patience=None,
                                                         frozen_head_epochs=head_epochs(recipe.train, True),
                                                         contrastive_pairs=0),
                               data=dataclasses.replace(recipe.data, test_split=None))
    head.strategy = dataclasses.replace(recipe.strategy)  # its own copy: building a model resolves token_pooling
    return head


def train_head_stage(recipe, run_dir: Path, source, stop, run: Callable[..., RunMetrics]):
    """Run the first stage, or read it where a resumed run finished it before it stopped. `run(head_recipe,
    resume, source) -> metrics` trains a recipe (the fine-tuning loop, with the weights a head stage leaves untrained
    allowed: recurrence's distance bias waits for the second stage). Returns what the second stage records of it
    ({train_seconds, steps, best_validation, best_metric}) and the InitSource it starts from: the first stage's kept
    model. A first stage stopped after a checkpoint continues from it; one stopped before is trained again. `stop`:
    the run's stop request, which the first stage checks too."""
    head = head_stage_recipe(recipe, run_dir)
    head_dir = Path(head.output_dir)
    if (head_dir / METRICS_FILE).is_file():
        record = read_run_metrics(head_dir)
    else:
        # debug, not info: a data error the stage meets first must stay the command's one line
        get_logger(__name__).debug(f"train.head_first: the pooler and head on the frozen backbone first, in {head_dir}")
        # Opened as any run folder is (the main process locks and tidies it, every process learns how it starts).
        with open_run(head_dir, head, is_finished(head_dir / CHECKPOINT), stop) as resuming:
            record = run(head, resuming, source)
    summary = {k: getattr(record, k) for k in ("train_seconds", "steps", "best_validation", "best_metric")}
    started = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, init_from=str(head_dir)))
    return summary, open_init_from(started)
