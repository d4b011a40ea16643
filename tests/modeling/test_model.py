"""LongDocumentClassifier: save -> load gives identical predictions for every fine-tuning mode; bad folders fail."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch

from helpers import build_model
from longbert.config import LoraConfig
from longbert.errors import LongbertError
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.settings import ModelSettings
from longbert.strategies.base import PassBudget
from longbert.strategies.configs import ChunkConfig

TEXTS = ["A wonderful film with a moving story. " * 30, "Dull.", "I hated every minute of this film. " * 5]


@pytest.mark.parametrize("finetune", ["full", "lora", "frozen"])
def test_save_load_gives_identical_predictions(finetune, tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, "chunk", [f"model.finetune={finetune}", "strategy.pooling=attention"])
    with torch.no_grad():  # move every trained part away from its initial value
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tmp_path / "saved")
    files = {p.name for p in (tmp_path / "saved").iterdir()}
    assert {"longbert_config.json", "head.safetensors", "tokenizer.json"} <= files
    assert "backbone" in files, "a backbone from a local folder is saved in every mode"
    assert ("adapter" in files) == (finetune == "lora")
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


def test_save_replaces_what_an_earlier_save_wrote_and_keeps_a_users_file_beside_it(tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, "chunk")
    target = tmp_path / "m"
    model.save_pretrained(target)
    written = json.loads((target / ".longbert-written").read_text())["paths"]
    assert "head.safetensors" in written and "longbert_config.json" in written
    # a file the earlier save wrote (listed) and this one does not write goes; the user's notes stay
    (target / "lexical.safetensors").write_text("stale")
    (target / ".longbert-written").write_text(json.dumps({"paths": [*written, "lexical.safetensors"]}))
    (target / "notes.txt").write_text("mine")
    model.save_pretrained(target)
    assert not (target / "lexical.safetensors").exists() and (target / "notes.txt").read_text() == "mine"
    assert json.loads((target / "longbert_config.json").read_text())["label_names"] == ["neg", "pos"]
    assert [p.name for p in tmp_path.iterdir()] == ["m"], "no staging folders left behind"


def test_save_refuses_a_folder_of_other_files_and_keeps_them(tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, "chunk")
    target = tmp_path / "m"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(LongbertError, match=f"^model folder {re.escape(str(target))} already holds files this command "
                                            r"did not write \(it has no longbert_config.json\); name a new or empty "
                                            "folder$"):
        model.save_pretrained(target)
    assert [p.name for p in target.iterdir()] == ["notes.txt"] and [p.name for p in tmp_path.iterdir()] == ["m"]


# -- saved settings: typed, and validated on load like a recipe ----------------------------------------------------

SAVED_KEYS = {"format", "backbone", "attention_dropout", "hidden_dropout", "budget", "strategy", "problem_type",
              "finetune", "classifier_dropout", "lora", "max_document_tokens", "label_names"}


@pytest.fixture(scope="module")
def saved(tiny_backbone_dir, tmp_path_factory):
    """One saved model per fine-tuning mode; tests damage copies of them."""
    root = tmp_path_factory.mktemp("saved")
    for finetune in ("full", "lora", "frozen"):
        build_model(tiny_backbone_dir, "chunk", [f"model.finetune={finetune}"]).save_pretrained(root / finetune)
    return root


def copy_of(saved, finetune, tmp_path):
    return shutil.copytree(saved / finetune, tmp_path / finetune)


def test_settings_are_typed_and_round_trip(saved, tiny_backbone_dir):
    model = LongDocumentClassifier.from_pretrained(saved / "lora")
    settings = model.settings
    assert isinstance(settings, ModelSettings) and isinstance(settings.strategy, ChunkConfig)
    assert isinstance(settings.budget, PassBudget) and isinstance(settings.lora, LoraConfig)
    assert (settings.backbone, settings.finetune, settings.strategy.window) == ("backbone/", "lora", 40)
    assert model.label_names == ["neg", "pos"]
    raw = json.loads((saved / "lora" / "longbert_config.json").read_text())
    assert set(raw) == SAVED_KEYS, "the file format (FORMAT_VERSION 1) is unchanged"
    assert settings.to_dict() == raw
    assert ModelSettings.from_dict(json.loads(json.dumps(settings.to_dict())), "here") == settings


def edit(raw, change):
    name, key, value = change
    section = raw if "." not in key else raw[key.split(".")[0]]
    leaf = key.split(".")[-1]
    if name == "drop":
        del section[leaf]
    else:
        section[leaf] = value


@pytest.mark.parametrize("change, message", [
    (("drop", "classifier_dropout", None), "missing key 'classifier_dropout'"),
    (("drop", "strategy.window", None), "missing key 'strategy.window'"),
    (("drop", "label_names", None), "missing key 'label_names'"),
    (("set", "lora", None), "has 4 problems: missing key 'lora.r'; missing key 'lora.alpha'"),
    (("set", "classifier_dropout", "high"), "classifier_dropout must be a number, got 'high'"),
    (("set", "strategy.window", "40"), "strategy.window must be an integer, got '40'"),
    (("set", "budget", [1, 2]), "budget must be a mapping, got \\[1, 2\\]$"),
    (("set", "finetune", "fulll"), "finetune must be one of full, lora, frozen, got 'fulll'"),
    (("set", "label_names", ["pos", "pos"]), "label_names must name each class once"),
    (("set", "extra", 1), "unknown recipe key 'extra'; valid keys: format, backbone"),
    (("set", "strategy.name", "chnk"),
     "strategy.name: unknown strategy 'chnk'; valid strategies: bigbird, chunk, recurrence, rmt"),
    (("set", "format", 7), "was written by another longbert format \\(7\\)"),
    (("set", "temperatures", [0.0]), "temperatures must hold 1 number\\(s\\) between 0.04979 and 20.09, the range "
     "calibration fits in \\(one\\), got \\[0.0\\]"),
    (("set", "temperatures", [1e8]), "temperatures must hold 1 number\\(s\\) between 0.04979 and 20.09"),
    (("set", "temperatures", [0.01]), "temperatures must hold 1 number\\(s\\) between"),
    (("set", "temperatures", [True]), "temperatures must be a list of float, got \\[True\\]"),
    (("set", "temperatures", [1.5, 2.0]), "temperatures must hold 1 number\\(s\\) between"),
    (("set", "temperatures", "2"), "temperatures must be a list"),
])
def test_hand_edited_config_is_one_clear_error(change, message, saved, tmp_path):
    folder = copy_of(saved, "frozen", tmp_path)
    raw = json.loads((folder / "longbert_config.json").read_text())
    edit(raw, change)
    (folder / "longbert_config.json").write_text(json.dumps(raw))
    source = re.escape(str(folder / "longbert_config.json"))
    with pytest.raises(LongbertError, match=f"^{source}(: | ){message}") as error:
        LongDocumentClassifier.from_pretrained(folder)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_head_file(damage, saved, tmp_path):
    folder = copy_of(saved, "frozen", tmp_path)
    head = folder / "head.safetensors"
    data = head.read_bytes()
    head.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00garbage" * 40)
    with pytest.raises(LongbertError, match=r"head.safetensors is damaged \(truncated or not safetensors\)"):
        LongDocumentClassifier.from_pretrained(folder)


def test_head_file_that_does_not_fit_the_config(saved, tmp_path):
    folder = copy_of(saved, "frozen", tmp_path)
    raw = json.loads((folder / "longbert_config.json").read_text())
    raw["label_names"] = ["a", "b", "c"]  # three classes: the saved (2, H) head no longer fits
    (folder / "longbert_config.json").write_text(json.dumps(raw))
    misfit = r"head.safetensors does not fit the model in longbert_config.json: .*head.weight"
    with pytest.raises(LongbertError, match=misfit):
        LongDocumentClassifier.from_pretrained(folder)


def test_head_state_keeps_its_names_and_loads_strictly(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk", ["strategy.pooling=attention"])
    state = model.head_state()
    assert {"head.weight", "head.bias"} <= set(state) and any(k.startswith("strategy.") for k in state)
    assert all(k.startswith(("strategy.", "head.")) for k in state)
    other = build_model(tiny_backbone_dir, "chunk", ["strategy.pooling=attention"], seed=1)
    other.load_head_state(state)
    assert all(torch.equal(v, other.head_state()[k]) for k, v in state.items())
    with pytest.raises(RuntimeError, match="Unexpected key"):
        other.load_head_state({**state, "head.extra": torch.zeros(1)})


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_backbone_weights_in_a_model_folder(damage, saved, tmp_path):
    folder = copy_of(saved, "full", tmp_path)
    weights = folder / "backbone" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 3] if damage == "truncated" else b"garbage" * 100)
    with pytest.raises(LongbertError, match=r"the weights of backbone '.*full/backbone' are damaged"):
        LongDocumentClassifier.from_pretrained(folder)


def test_damaged_or_missing_adapter(saved, tmp_path):
    folder = copy_of(saved, "lora", tmp_path)
    (folder / "adapter" / "adapter_model.safetensors").write_bytes(b"garbage" * 100)
    with pytest.raises(LongbertError, match=r"the weights of LoRA adapter '.*adapter' are damaged"):
        LongDocumentClassifier.from_pretrained(folder)
    shutil.rmtree(folder / "adapter")
    with pytest.raises(LongbertError, match=r"is incomplete: no adapter \(finetune is lora\)"):
        LongDocumentClassifier.from_pretrained(folder)


def test_model_folder_with_custom_code_in_its_backbone_is_not_run(saved, tmp_path, monkeypatch):
    from modeling.test_backbone import refuse_to_be_asked, with_custom_code  # tests/ is on pythonpath

    folder = copy_of(saved, "full", tmp_path)
    marker = with_custom_code(str(folder / "backbone"), tmp_path / "custom", "custom-bert")
    shutil.rmtree(folder / "backbone")
    shutil.move(tmp_path / "custom", folder / "backbone")
    asked = refuse_to_be_asked(monkeypatch)
    with pytest.raises(LongbertError, match="contains custom code"):
        LongDocumentClassifier.from_pretrained(folder)
    assert not asked and not (folder / "backbone" / marker.name).exists()


def test_a_model_saved_before_a_setting_existed_loads_as_it_was_trained(saved, tmp_path):
    """chunk's unit_weights (new_tokens by default now) did not exist before: an older folder lacks the key and
    means the plain mean (equal), which is what it was trained with; any other missing key is still an error."""
    old = tmp_path / "old"
    shutil.copytree(saved / "lora", old)
    config = json.loads((old / "longbert_config.json").read_text())
    assert config["strategy"].pop("unit_weights") == "new_tokens"
    (old / "longbert_config.json").write_text(json.dumps(config))
    assert LongDocumentClassifier.from_pretrained(old).settings.strategy.unit_weights == "equal"
    config["strategy"].pop("window")
    (old / "longbert_config.json").write_text(json.dumps(config))
    with pytest.raises(LongbertError, match="missing key 'strategy.window'"):
        LongDocumentClassifier.from_pretrained(old)


# -- calibration: a temperature carried in the settings -------------------------------------------------------------

def test_a_calibrated_folder_answers_softer_probabilities_with_the_same_labels(saved, tmp_path, tokenizer):
    """A folder whose settings hold a temperature answers softmax(logits / T); without its key (every folder saved
    before calibration existed) or after `without_calibration()`, softmax(logits), the same argmax either way."""
    folder = copy_of(saved, "full", tmp_path)
    plain = LongDocumentClassifier.from_pretrained(folder)
    assert not plain.calibrated and "temperatures" not in json.loads((folder / "longbert_config.json").read_text())
    plain.settings.temperatures = [3.0]
    plain.save_pretrained(tmp_path / "calibrated")
    assert json.loads((tmp_path / "calibrated" / "longbert_config.json").read_text())["temperatures"] == [3.0]
    model = LongDocumentClassifier.from_pretrained(tmp_path / "calibrated")
    assert model.calibrated and "calibrated on validation" in (tmp_path / "calibrated" / "README.md").read_text()
    logits = torch.tensor([[2.0, -1.0], [-0.5, 0.25]])
    torch.testing.assert_close(model.probabilities(logits), (logits / 3).softmax(-1))
    torch.testing.assert_close(model.probabilities(logits, calibrated=False), logits.softmax(-1))
    texts = ["a short review of a film", "another one, longer and rather dull " * 20]
    calibrated = [list(r["probabilities"].values()) for r in model.predict(texts, precision="fp32")]
    raw = [list(r["probabilities"].values()) for r in model.without_calibration().predict(texts, precision="fp32")]
    assert not model.calibrated and model.settings.temperatures is None
    assert np.argmax(calibrated, 1).tolist() == np.argmax(raw, 1).tolist()
    assert np.max(calibrated) < np.max(raw)  # a temperature above 1 softens


def test_without_calibration_moves_multi_label_thresholds_to_the_same_decisions():
    settings = ModelSettings(problem_type="multi_label", label_names=["a", "b", "c"], thresholds=[0.3, 0.5, 0.8],
                             temperatures=[2.0, 0.5, 3.0])
    plain = settings.without_calibration()
    assert plain.temperatures is None and settings.temperatures == [2.0, 0.5, 3.0]  # a copy: the original kept
    logits = torch.randn(400, 3, generator=torch.Generator().manual_seed(0)) * 4
    calibrated = torch.sigmoid(logits / torch.tensor(settings.temperatures)) >= torch.tensor(settings.thresholds)
    uncalibrated = torch.sigmoid(logits) >= torch.tensor(plain.thresholds)
    assert torch.equal(calibrated, uncalibrated)
    assert plain.thresholds[1] == pytest.approx(0.5)  # 0.5 is logit 0, which every temperature keeps
