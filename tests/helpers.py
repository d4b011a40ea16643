"""Building tiny models for tests."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from longbert.config import load_recipe
from longbert.evaluation.predictions import PredictionRow
from longbert.modeling.classifier import LongDocumentClassifier

# Settings that fit every registered strategy into the tiny backbone (128 positions). A strategy registered
# without an entry here fails the contract tests, so none escapes them.
TINY_STRATEGY_SETTINGS = {
    "truncate": ["strategy.max_tokens=100", "strategy.head_tokens=30"],
    "chunk": ["strategy.window=40"],
    "sliding": ["strategy.window=40", "strategy.stride=20"],
    "bigbird": ["strategy.max_tokens=256", "strategy.block_size=16", "strategy.full_attention_up_to=64"],
    "recurrence": ["strategy.segment=40", "strategy.memory=42"],
    "rmt": ["strategy.segment=40", "strategy.memory_tokens=4"],
}


# The training that tests counting steps, checkpoints and validations were written for: one stage, every epoch run
# (the defaults before 2026-11-28). The defaults' head stage, unit loss and early stopping have tests of their own.
ONE_STAGE = ["train.head_first=false", "train.unit_loss_weight=0", "train.early_stopping_patience=null",
             "train.checkpoint_every_steps=50"]


def missing_shared_data(reason: str):
    """Skip a test that needs ../shared/data when a developer's checkout has none; fail it under CI (CI=true), where
    the data is always beside the clone and a skip would hide that most of the suite did not run."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def tiny_bert_config(**overrides):
    """A tiny random-weight BERT config (hidden 32, 2 layers, 128 positions); `overrides` replace any field."""
    from transformers import BertConfig

    settings = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=128, attention_probs_dropout_prob=0.0,
                    hidden_dropout_prob=0.0)
    settings.update(overrides)
    return BertConfig(**settings)


def build_model(backbone_dir: str, strategy: str, extra=(), labels=("neg", "pos"), seed: int = 0):
    overrides = [f"backbone.name={backbone_dir}", f"strategy.name={strategy}",
                 *TINY_STRATEGY_SETTINGS.get(strategy, []), *extra]
    torch.manual_seed(seed)
    model = LongDocumentClassifier.from_recipe(load_recipe(None, overrides), list(labels))
    return model.eval()


def random_documents(lengths, seed: int = 0, vocab: tuple[int, int] = (1000, 30000)):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(*vocab, (n,), generator=generator) for n in lengths]


def assert_same_run(a: Path, b: Path, weights=("checkpoint/model.safetensors", "best/head.safetensors"),
                    steps: int | None = None) -> None:
    """Two run folders hold the same weights (the files named), validation history and test metrics, bit for bit."""
    for name in weights:
        x, y = load_file(a / name), load_file(b / name)
        assert x.keys() == y.keys(), name
        for key in x:
            assert torch.equal(x[key], y[key]), f"{name}: {key}"
    metrics = lambda d: json.loads((d / "metrics.json").read_text())
    assert metrics(a)["validation_history"] == metrics(b)["validation_history"]
    if steps is not None:
        assert metrics(a)["steps"] == metrics(b)["steps"] == steps
    test = lambda d: {k: v for k, v in metrics(d)["test"].items() if k != "speed"}
    assert test(a) == test(b)


class StopAfterSteps(threading.Event):
    """A stop request that sets itself at the n-th check of a training loop (which checks once after every optimiser
    step); the checks of other phases (caching embeddings, which checks after every batch) are answered, not counted."""

    LOOPS = ("longbert.training.finetune", "longbert.training.contrastive", "longbert.training.pretraining.pretrain")

    def __init__(self, steps: int):
        super().__init__()
        self.steps, self.checks = steps, 0

    def is_set(self) -> bool:
        if sys._getframe(1).f_globals.get("__name__") in self.LOOPS:
            self.checks += 1
            if self.checks == self.steps:
                self.set()
        return super().is_set()


def run_record(**fields):
    """A run's metrics.json record (training.run_record.RunMetrics) with `fields` set, the rest as a tiny run that
    logged nothing has them."""
    from longbert.training.run_record import RunMetrics

    base = dict(recipe="r", strategy="chunk", machine={}, data={}, label_names=["neg", "pos"],
                trainable_parameters=1, train_seconds=1.0, steps=30, best_step=None, best_validation=None,
                best_metric="accuracy", train_log=[], validation_history=[])
    return RunMetrics(**{**base, **fields})


def prediction_rows(labels, probabilities):
    """PredictionRows of `labels` and `probabilities`, one per document, document i 100 + 300 * i tokens long."""
    return [PredictionRow(index=i, n_tokens=100 + 300 * i, label=label, probabilities=p,
                          predicted=max(range(len(p)), key=p.__getitem__))
            for i, (label, p) in enumerate(zip(labels, probabilities))]


ENSEMBLE_LABELS = [0, 1, 0, 1]


def ensemble_validation():
    """Three runs' validation rows: a is right on documents 0-2, b on 1-3, c on none; averaged, a + b is right on all
    four, a + b + c on three, the pairs with c on one."""
    return {
        "a": prediction_rows(ENSEMBLE_LABELS, [[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.6, 0.4]]),
        "b": prediction_rows(ENSEMBLE_LABELS, [[0.4, 0.6], [0.1, 0.9], [0.9, 0.1], [0.3, 0.7]]),
        "c": prediction_rows(ENSEMBLE_LABELS, [[0.2, 0.8], [0.95, 0.05], [0.1, 0.9], [0.9, 0.1]]),
    }


def run_script(path, *args):
    """Run a benchmark script (benchmarks/scripts/NAME.py) as `python NAME.py ARGS` would, but in this process, which
    has imported torch and longbert already (a subprocess pays seconds for that): its stdout, stderr and exit status
    as a CompletedProcess. SystemExit("error: ...") exits 1 with the message on stderr, as Python does."""
    import contextlib
    import io
    import runpy
    import subprocess
    import sys
    import traceback

    out, err, code = io.StringIO(), io.StringIO(), 0
    argv, search = sys.argv, list(sys.path)
    sys.argv = [str(path), *map(str, args)]
    sys.path.insert(0, str(Path(path).parent))  # as python puts a script's folder first: scripts import each other
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as stop:
                if isinstance(stop.code, str):
                    print(stop.code, file=sys.stderr)
                    code = 1
                else:
                    code = stop.code or 0
            except Exception:  # what Python prints for an uncaught exception, and its status
                traceback.print_exc()
                code = 1
    finally:
        sys.argv, sys.path[:] = argv, search
    return subprocess.CompletedProcess([str(path), *map(str, args)], code, out.getvalue(), err.getvalue())


def unchecked(config_class, **settings):
    """A settings dataclass built without its check on construction (as `build` fills one from YAML), so that a test
    can read its `problems` one by one."""
    from longbert.utils.checked import building

    with building():
        return config_class(**settings)


def assert_user_error(result, *fragments):
    """A CLI result (typer's CliRunner) that is a user error: exit 2, one line starting 'error: ' holding every
    fragment, no traceback."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
