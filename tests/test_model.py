"""LongDocumentClassifier: save -> load gives identical predictions for every fine-tuning mode; bad folders fail."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import build_model
from longbert.errors import LongbertError
from longbert.model import LongDocumentClassifier

TEXTS = ["A wonderful film with a moving story. " * 30, "Dull.", "I hated every minute of this film. " * 5]


@pytest.mark.parametrize("finetune", ["full", "lora", "frozen"])
def test_save_load_gives_identical_predictions(finetune, tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, "chunk", [f"model.finetune={finetune}", "strategy.pooling=attention"])
    with torch.no_grad():  # move every trained part away from its initial value
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tmp_path / "saved")
    files = {p.name for p in (tmp_path / "saved").iterdir()}
    assert {"longbert_config.json", "head.safetensors", "tokenizer.json"} <= files
    assert ("backbone" in files) == (finetune == "full") and ("adapter" in files) == (finetune == "lora")
    assert not list(tmp_path.rglob("*.bin")) and not list(tmp_path.rglob("*.pt")), "no pickle files"
    loaded = LongDocumentClassifier.from_pretrained(tmp_path / "saved")
    before, after = model.predict(TEXTS), loaded.predict(TEXTS)
    for a, b in zip(before, after):
        assert a["label"] == b["label"]
        for name in a["probabilities"]:
            assert a["probabilities"][name] == pytest.approx(b["probabilities"][name], abs=1e-5)


def test_lora_trains_only_adapters_and_head(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk", ["model.finetune=lora", "model.lora.r=4"])
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or not n.startswith("backbone.") for n in trainable)
    assert any("lora_" in n for n in trainable)


def test_frozen_backbone_has_no_trainable_backbone_weights_and_stays_in_eval(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk", ["model.finetune=frozen"]).train()
    assert not any(p.requires_grad for p in model.backbone.parameters())
    assert not model.backbone.training and model.head.training


def test_predict_output_shape_and_multi_label(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "truncate", ["model.problem_type=multi_label"], labels=("x", "y", "z"))
    out = model.predict(TEXTS)
    assert len(out) == 3 and set(out[0]["probabilities"]) == {"x", "y", "z"}
    assert all(set(r["labels"]) <= {"x", "y", "z"} for r in out)
    with pytest.raises(LongbertError, match="text 1 is empty"):
        model.predict(["fine", "   "])


def test_bad_model_folders(tmp_path, tiny_backbone_dir):
    with pytest.raises(LongbertError, match="is not a longbert model folder"):
        LongDocumentClassifier.from_pretrained(tmp_path)
    (tmp_path / "longbert_config.json").write_text("{not json")
    with pytest.raises(LongbertError, match="is damaged"):
        LongDocumentClassifier.from_pretrained(tmp_path)


def test_lora_target_that_does_not_exist(tiny_backbone_dir):
    with pytest.raises(LongbertError, match="model.lora.target_modules: the backbone has no module named 'q_proj'"):
        build_model(tiny_backbone_dir, "chunk", ["model.finetune=lora", "model.lora.target_modules=[q_proj]"])


def test_save_replaces_an_existing_folder_whole(tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, "chunk")
    target = tmp_path / "m"
    target.mkdir()
    (target / "stale.txt").write_text("old")
    model.save_pretrained(target)
    assert not (target / "stale.txt").exists()
    assert json.loads((target / "longbert_config.json").read_text())["label_names"] == ["neg", "pos"]
    assert [p.name for p in tmp_path.iterdir()] == ["m"], "no staging folders left behind"


def test_backbone_errors_are_clear(tmp_path, monkeypatch):
    from longbert.backbone import load_backbone

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(LongbertError, match=r"could not load backbone 'someone/no-such-bert': it is not a local model folder"):
        load_backbone("someone/no-such-bert")
    with pytest.raises(LongbertError, match="has no config.json"):
        load_backbone(str(tmp_path))
