"""Model folders saved by longbert before its modules moved into subpackages still load, and give the probabilities
they gave when they were saved: through `LongDocumentClassifier.from_pretrained` and through transformers' pipeline.
The folders (tests/fixtures/saved_before_layout, see its README) hold tiny random weights: full fine-tuning with
chunk, LoRA with sliding windows, recurrence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import longbert  # noqa: F401  (registers longbert's model type with transformers' Auto classes, for the pipeline)
from longbert.modeling.classifier import LongDocumentClassifier

SAVED = Path(__file__).resolve().parents[1] / "fixtures" / "saved_before_layout"
FOLDERS = sorted(p.name for p in SAVED.iterdir() if p.is_dir())


@pytest.fixture(params=FOLDERS)
def saved(request, tmp_path) -> tuple[Path, dict]:
    """(a copy of one saved folder, what it predicted when saved): loading must not touch the committed files."""
    folder = tmp_path / request.param
    shutil.copytree(SAVED / request.param, folder)
    return folder, json.loads((folder / "expected.json").read_text())


def test_every_kind_of_saved_folder_is_here():
    assert FOLDERS == ["chunk", "recurrence", "sliding_lora"]


def test_a_folder_saved_before_the_move_predicts_what_it_did(saved):
    folder, expected = saved
    model = LongDocumentClassifier.from_pretrained(folder)
    rows = model.predict(expected["texts"], precision="fp32")
    for row, want in zip(rows, expected["probabilities"], strict=True):
        assert row["probabilities"] == pytest.approx(want, abs=1e-5)
        assert row["label"] == max(want, key=want.get)


def test_a_folder_saved_before_the_move_works_in_transformers_pipeline(saved, monkeypatch):
    from transformers import pipeline

    # The pipeline runs at precision "auto", bf16 on a CPU with AVX512-BF16 or AMX, which moves these probabilities
    # by about 2e-4; the expected ones are fp32, so "auto" must mean fp32 here whatever the CPU.
    monkeypatch.setattr("longbert.utils.hardware.fast_bf16", lambda device: False)
    folder, expected = saved
    classify = pipeline("text-classification", model=str(folder), top_k=None)
    for text, want in zip(expected["texts"], expected["probabilities"], strict=True):
        got = {row["label"]: row["score"] for row in classify([text])[0]}
        assert got == pytest.approx(want, abs=1e-5)
