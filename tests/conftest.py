"""Shared fixtures: a tiny random-weight BERT (built in-process, saved to a temp folder with the real uncased
WordPiece tokenizer that ships with the offline MiniLM package) and a small slice of real IMDb."""

from __future__ import annotations

import gc
import gzip
import json
import os
from pathlib import Path

import pytest
import torch

from helpers import ONE_STAGE, missing_shared_data, tiny_bert_config

os.environ.setdefault("LONGBERT_PROGRESS", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# No token cache between tests (one test could otherwise see another's tokenizing skipped); the cache has its own tests.
os.environ["LONGBERT_TOKEN_CACHE"] = "off"
# Two threads, or one in each of pytest-xdist's worker processes (addopts runs one a core): more would only contend.
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# The folders longbert's data loader searches (LONGBERT_DATA_DIR first), so that a worktree elsewhere finds the data.
DATA_ROOTS = [Path(p) for p in os.environ.get("LONGBERT_DATA_DIR", "").split(os.pathsep) if p] + [SHARED_DATA]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before each test, what earlier tests left alive is collected once and then frozen (gc.freeze), so that the
    full collections longbert runs between strategies and before a memory measurement, and Python's own, scan only
    what this test made. A worker holds every module pytest imported; unfrozen, one full collection there took about
    half a second and the collections a third of a compare test's time."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need CUDA: skipped where there is none."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tokenizer():
    from transformers import AutoTokenizer

    from longbert.modeling.backbone import prepare_tokenizer, resolve_backbone

    return prepare_tokenizer(AutoTokenizer.from_pretrained(resolve_backbone("minilm")))


@pytest.fixture(scope="session")
def tiny_backbone_dir(tmp_path_factory, tokenizer) -> str:
    """A folder holding a tiny random BertModel (128 positions) and the MiniLM tokenizer."""
    from transformers import BertModel

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-bert")
    BertModel(tiny_bert_config(), add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture
def tiny_backbone(tiny_backbone_dir):
    from longbert.modeling.backbone import load_backbone

    model, _ = load_backbone(tiny_backbone_dir)
    return model.eval()


@pytest.fixture(scope="session")
def imdb_slice(tmp_path_factory) -> Path:
    """A folder of train/test jsonl files: 60 + 30 real IMDb reviews (both labels; some over 128 tokens)."""
    source = next((root / "imdb" for root in DATA_ROOTS if (root / "imdb").is_dir()), None)
    if source is None:
        missing_shared_data("imdb is in neither LONGBERT_DATA_DIR nor ../shared/data")
    folder = tmp_path_factory.mktemp("imdb-slice")
    for split, per_label in (("train", 30), ("test", 15)):
        rows = {0: [], 1: []}
        with gzip.open(source / f"{split}.jsonl.gz", "rt") as f:
            for line in f:
                row = json.loads(line)
                if len(rows[row["label"]]) < per_label and len(row["text"]) < 3000:
                    rows[row["label"]].append({"text": row["text"], "label": ["neg", "pos"][row["label"]]})
                if all(len(r) == per_label for r in rows.values()):
                    break
        with open(folder / f"{split}.jsonl", "w") as out:
            for a, b in zip(rows[0], rows[1]):
                out.write(json.dumps(a) + "\n" + json.dumps(b) + "\n")
    return folder


@pytest.fixture
def tiny_recipe(tiny_backbone_dir, imdb_slice, tmp_path):
    """Overrides for a run that trains a tiny model on the IMDb slice in seconds."""
    return [
        f"backbone.name={tiny_backbone_dir}",
        f"data.path={imdb_slice}",
        "data.label_names=[neg, pos]",
        "data.validation_fraction=0.25",
        "data.max_document_tokens=400",
        "strategy.name=chunk",
        "strategy.window=62",
        "train.epochs=2",
        "train.batch_size=8",
        "train.learning_rate=1e-3",
        "train.mixed_precision=no",
        *ONE_STAGE,
        "strategy.pooling=mean",
        "eval.batch_size=16",
        f"output_dir={tmp_path / 'run'}",
    ]
