"""One split per run: every stage of a run (the head stage, the self-training teacher, the end-to-end stage) trains
and validates on the documents the run split once, whatever form the data takes. No test document reaches a stage's
training or validation, and each stage validates on the run's validation documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import longbert
import longbert.modeling.backbone as backbone
import longbert.modeling.model_folder as folder_module
import longbert.training.run_inputs as run_inputs
import longbert.training.trainer as trainer

pytestmark = pytest.mark.heavy

WORDS = ["harbour", "winter", "letter", "brothers", "boat", "capital", "mayor", "summer", "band", "town", "river"]
STAGES = ["train.head_first=true", "train.frozen_head_epochs=1", "train.epochs=1", "strategy.pooling=attention"]


def documents(count: int, start: int = 0) -> list[dict]:
    """`count` short made-up documents, every text different, labels alternating."""
    return [{"id": f"doc{i}", "text": f"review {i}: " + " ".join(WORDS[(i * k + 3) % 11] for k in range(1, 9)),
             "label": ["neg", "pos"][i % 2]} for i in range(start, start + count)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def seen(monkeypatch):
    """What each stage's loop was given: {stage: {role: set of texts}}, a stage named by its run folder's name, or
    head_stage."""
    stages = {}
    fit = trainer.fit

    def recording(recipe, model, corpus, *args, fresh, **kwargs):
        name = fresh.stage if fresh.stage != "end_to_end" else Path(recipe.output_dir).name
        stages[name] = {role: set(split["text"]) for role, split in corpus.splits.items()}
        return fit(recipe, model, corpus, *args, fresh=fresh, **kwargs)

    monkeypatch.setattr(trainer, "fit", recording)
    return stages


@pytest.fixture
def loads(monkeypatch):
    """How often a backbone's weights and the corpus were loaded, anywhere: {"backbone": n, "corpus": n}."""
    counts = {"backbone": 0, "corpus": 0}

    def counted(name, function):
        def call(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)
        return call

    encoder = counted("backbone", backbone.load_encoder)  # every backbone loaded: by name, or from a model folder
    monkeypatch.setattr(backbone, "load_encoder", encoder)
    monkeypatch.setattr(folder_module, "load_encoder", encoder)
    monkeypatch.setattr(run_inputs, "load_corpus", counted("corpus", run_inputs.load_corpus))
    return counts


def one_file(tmp_path):
    return [f"data.path={write_jsonl(tmp_path / 'reviews.jsonl', documents(60))}"], {}


def folder(tmp_path):
    root = tmp_path / "reviews"
    root.mkdir()
    write_jsonl(root / "train.jsonl", documents(40))
    write_jsonl(root / "test.jsonl", documents(16, start=40))
    write_jsonl(root / "unlabelled.jsonl", [{"text": d["text"]} for d in documents(12, start=100)])
    return [f"data.path={root}", "data.unlabelled_split=unlabelled", "train.self_training_documents=12",
            "train.self_training_threshold=0.5"], {}


def in_memory(tmp_path):
    rows = documents(56)
    as_columns = {split: {"text": [r["text"] for r in part], "label": [r["label"] for r in part]}
                  for split, part in (("train", rows[:40]), ("test", rows[40:]))}
    return [], {"data": as_columns}


@pytest.mark.parametrize("form", [one_file, folder, in_memory], ids=["one-file", "folder+teacher", "in-memory"])
def test_no_stage_trains_or_validates_on_a_test_document_and_every_stage_validates_on_the_runs(
        tiny_recipe, tmp_path, seen, loads, form):
    settings, given = form(tmp_path)
    overrides = [o for o in tiny_recipe if not o.startswith("data.path=")] + STAGES + settings
    recipe = longbert.load_recipe(None, overrides)
    longbert.train(recipe, **given)
    run = seen[Path(recipe.output_dir).name]
    test = run["test"]
    assert test and not test & run["train"] and not test & run["validation"]
    expected = {"run", "head_stage"} | ({"self_training"} if "self_training" in str(settings) else set())
    assert set(seen) == expected
    for name, stage in seen.items():
        assert "test" not in stage or name == "run", f"{name} was given the test split"
        assert stage["validation"] == run["validation"], f"{name} validates on other documents than the run"
        assert not stage["train"] & test, f"{name} trained on test documents"
        assert not stage["train"] & run["validation"], f"{name} trained on validation documents"
    assert seen["head_stage"]["train"] == run["train"], "the head stage trains on the run's training documents"
    assert loads == {"backbone": 1, "corpus": 1}, "the backbone and the documents are loaded once per run"
