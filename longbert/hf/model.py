"""LongbertForSequenceClassification: a saved longbert model as a transformers model, so that after `import longbert`

    AutoConfig.from_pretrained(folder)                              # LongbertConfig
    AutoModelForSequenceClassification.from_pretrained(folder)     # this class
    pipeline("text-classification", model=folder)                 # whole documents, label names

load it from a folder or a hub id, with no remote code. It wraps a LongDocumentClassifier (the core, in
`longbert.modeling.classifier`): `forward` takes what a tokenizer returns for whole documents (never truncated: the
saved tokenizer allows any length), strips [CLS], [SEP] and padding, cuts each document at the model's
max_document_tokens as `predict` does, and runs the strategy over the rest. Importing this module registers the class
with AutoModelForSequenceClassification (`longbert.hf.hook` imports it when transformers loads its Auto models). There
is no AutoModel (headless) registration: a longbert model is a classifier, not an encoder of token states.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

from longbert.errors import LongbertError
from longbert.modeling.calibration import calibrated_logits
from longbert.modeling.hf_config import LongbertConfig
from longbert.utils.hardware import autocast_for, check_precision

# What transformers' Auto classes and pipelines pass to from_pretrained on their own; longbert needs none of it.
PASSED_BY_TRANSFORMERS = {"_from_auto", "_from_pipeline", "trust_remote_code", "adapter_kwargs", "code_revision"}
HUB_OPTIONS = {"revision", "cache_dir", "token", "local_files_only", "force_download"}


class LongbertForSequenceClassification(PreTrainedModel):
    """A longbert model behind transformers' interface: `forward(input_ids, attention_mask, labels=None)` ->
    SequenceClassifierOutput(loss, logits (B, C)); `config.id2label` names the classes. The wrapped
    LongDocumentClassifier is `.classifier` (its `predict` takes texts)."""

    config_class = LongbertConfig
    base_model_prefix = "classifier"
    main_input_name = "input_ids"

    def __init__(self, config: LongbertConfig, classifier=None):
        if classifier is None:
            raise LongbertError("a longbert model cannot be built from a config alone: train one with "
                                "`longbert train`, or load a saved one with from_pretrained")
        super().__init__(config)
        self.classifier = classifier
        self.precision = "auto"  # inference precision (see from_pretrained's `precision`)
        self.post_init()

    def init_weights(self) -> None:
        """Nothing to initialise: every weight comes from the wrapped model (transformers' post_init would otherwise
        draw the head anew)."""

    @classmethod
    def from_classifier(cls, classifier) -> "LongbertForSequenceClassification":
        """Wrap a LongDocumentClassifier (its weights are shared, not copied)."""
        return cls(LongbertConfig.from_settings(classifier.settings), classifier)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, *model_args,
                        config: LongbertConfig | None = None, **kwargs) -> "LongbertForSequenceClassification":
        """Load a folder written by longbert's save_pretrained (or a run folder), or a hub id, as
        LongDocumentClassifier.from_pretrained does. Understood options: the hub's (revision, cache_dir, token,
        local_files_only, force_download), dtype (a torch dtype, or "auto": as saved), device_map (one device),
        precision: how eval-mode forwards run, as `predict --precision` (auto, fp32, bf16, or int8: the
        backbone's Linear layers dynamically quantized, on the CPU); through a pipeline,
        `model_kwargs={"precision": "int8"}`; and calibrated (default True): False takes the model's calibration off
        (`LongDocumentClassifier.without_calibration`), as `predict --no-calibration`. Anything else is refused in one
        LongbertError line rather than ignored."""
        # Here, not at the top: the import hook imports this module when transformers loads its Auto models (their
        # registry), which the classifier's own modules do at their top, so this import would find it half-imported.
        from longbert.modeling.classifier import LongDocumentClassifier  # noqa: PLC0415 (import hook: see above)

        precision = kwargs.pop("precision", "auto")
        check_precision(precision)
        calibrated = kwargs.pop("calibrated", True)
        hub = {k: kwargs.pop(k) for k in HUB_OPTIONS if k in kwargs}
        dtype, torch_dtype = kwargs.pop("dtype", None), kwargs.pop("torch_dtype", None)
        dtype = dtype if dtype is not None else torch_dtype
        device_map = kwargs.pop("device_map", None)
        unknown = sorted(set(kwargs) - PASSED_BY_TRANSFORMERS)
        if model_args or unknown:
            raise LongbertError(f"{cls.__name__}.from_pretrained does not take "
                                f"{', '.join(unknown) or 'positional model arguments'}")
        classifier = LongDocumentClassifier.from_pretrained(pretrained_model_name_or_path, **hub)
        if not calibrated:
            classifier.without_calibration()
        if config is not None and config.label_names() != classifier.label_names:
            raise LongbertError(f"{pretrained_model_name_or_path}: config.json names the labels "
                                f"{config.label_names()} but longbert_config.json {classifier.label_names}; "
                                f"longbert_config.json is the source of truth: save the model again to rewrite "
                                f"config.json")
        model = cls.from_classifier(classifier)
        model.precision = precision
        if isinstance(dtype, str) and dtype != "auto":
            dtype = getattr(torch, dtype, dtype)
        if isinstance(dtype, torch.dtype):
            model.to(dtype)
        elif dtype not in (None, "auto"):
            raise LongbertError(f"dtype must be a torch dtype or 'auto', got {dtype!r}")
        if device_map is not None:
            model.to(single_device(device_map))
        model.eval()
        return model

    def documents(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[torch.Tensor]:
        """input_ids (B, T) as a tokenizer returns them ([CLS] doc [SEP], padded) -> B (T_i,) content-id tensors, cut
        at max_document_tokens. Padding goes by attention_mask (either side); a leading [CLS] and a trailing [SEP]
        are dropped."""
        tokenizer = self.classifier.tokenizer
        cap = self.classifier.settings.max_document_tokens
        mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        out = []
        for row, (ids, keep) in enumerate(zip(input_ids, mask)):
            ids = ids[keep]  # (T_i + 2,)
            if len(ids) and ids[0] == tokenizer.cls_token_id:
                ids = ids[1:]
            if len(ids) and ids[-1] == tokenizer.sep_token_id:
                ids = ids[:-1]
            if len(ids) == 0:
                raise LongbertError(f"document {row} has no tokens besides [CLS]/[SEP]: it is empty")
            out.append(ids[:cap])
        return out

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                return_dict: bool | None = None) -> SequenceClassifierOutput:
        """input_ids, attention_mask (B, T); labels (B,) class indices, or (B, C) multi-hot for multi-label ->
        logits (B, C) and, with labels, the loss of those logits. token_type_ids are ignored (one segment per
        document). In eval mode the forward runs at `self.precision` as `predict` does (auto: bf16 where the hardware
        runs it fast; int8: the classifier's int8 wrapper, longbert.modeling.int8), and a calibrated model's logits
        come divided by its temperatures, so that the softmax or sigmoid a pipeline applies gives `predict`'s
        calibrated probabilities. In training mode they are the logits as trained (the calibration is fitted after).
        """
        documents = self.documents(input_ids, attention_mask)
        if self.training:
            logits = self.classifier(documents).logits.float()  # (B, C)
        else:
            with autocast_for(self.classifier, self.precision):
                logits = self.classifier.for_precision(self.precision)(documents).logits  # (B, C)
            logits = calibrated_logits(self.classifier.settings, logits)  # float32, over the temperatures
        loss = None if labels is None else self.classifier.loss(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)

    def save_pretrained(self, save_directory: str | Path, is_main_process: bool = True, push_to_hub: bool = False,
                        repo_id: str | None = None, **hub) -> None:
        """Write longbert's model folder (LongDocumentClassifier.save_pretrained: config.json, the model card and
        everything longbert needs); with push_to_hub, upload it too (to `repo_id`, by default the folder's name;
        `hub`: push_to_hub's options)."""
        if not is_main_process:
            return
        self.classifier.save_pretrained(save_directory)
        if push_to_hub:
            self.push_to_hub(repo_id or Path(save_directory).name, **hub)

    def push_to_hub(self, repo_id: str, private: bool | None = None, token: str | bool | None = None,
                    commit_message: str | None = None, revision: str | None = None, create_pr: bool = False):
        """Upload the model folder to hub repository `repo_id` (see `longbert.modeling.hub.push_to_hub`)."""
        return self.classifier.push_to_hub(repo_id, private=private, token=token, commit_message=commit_message,
                                           revision=revision, create_pr=create_pr)


def single_device(device_map) -> torch.device:
    """device_map as one device: 'auto' (the GPU when there is one), a device name or index. A dict (layers spread
    over devices) is refused: a longbert model runs on one device."""
    if isinstance(device_map, dict):
        raise LongbertError("device_map: a longbert model runs on one device; pass one ('cpu', 'cuda:0', 'auto')")
    if device_map == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device_map)
    except (RuntimeError, TypeError):
        raise LongbertError(f"device_map: {device_map!r} is not a device") from None


AutoModelForSequenceClassification.register(LongbertConfig, LongbertForSequenceClassification, exist_ok=True)
