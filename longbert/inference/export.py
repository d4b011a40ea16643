"""`longbert export`: a saved model as two ONNX graphs, a per-window encoder and a pooling-and-head graph, with its
tokenizer and settings, so that longbert/inference/exported.py can read documents of any length with onnxruntime;
optionally an int8 copy of the encoder (onnxruntime's dynamic quantization); and parity.json, which says how far the
exported graphs are from the PyTorch model in fp32 on real texts. The folder's files are described in exported.py.

Only window strategies export: those that are `ReadsWindows` (strategies/base.py), whose windows are read
independently, so that one fixed graph for a pass of windows (the backbone, then the strategy's `window_vectors`)
serves any document length; the head graph is the strategy's `pool` and the classification head. The others read a
document as one sequence (block-sparse attention over all of it) or carry a memory from segment to segment.

The graphs are made by torch.onnx's torch.export-based exporter (`dynamo=True`, which needs onnxscript): the
TorchScript exporter is deprecated since torch 2.9, and it bakes the number of units into the reshapes of the
ToBERT transformer pooler, so a graph traced with 3 units fails on 5.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.export import Dim

from longbert.config import load_recipe
from longbert.data.lengths import LONG_TOKENS
from longbert.data.sources import load_raw_splits
from longbert.errors import LongbertError
from longbert.inference.exported import ENCODER_FILES, EXPORT_FORMAT, ExportedClassifier
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.ensemble import refuse_ensemble
from longbert.modeling.reads_texts import prediction_rows
from longbert.strategies.base import ReadsWindows, Units
from longbert.strategies.registry import strategies_with
from longbert.utils.destinations import writable_folder
from longbert.utils.extras import require
from longbert.utils.folders import EXPORT_FILE, ONNX_HEAD_FILE, PARITY_FILE, RECIPE_FILE
from longbert.utils.outputs import atomic_folder, named_folder

FORMATS = ("onnx",)
QUANTIZATIONS = ("int8",)
PARITY_DOCUMENTS = 32


@dataclass
class ExportResult:
    folder: Path
    parity: dict


class WindowEncoder(nn.Module):
    """The encoder graph: one pass of windows -> one vector per window, as the strategy's `window_vectors` makes
    them."""

    def __init__(self, backbone: nn.Module, strategy: ReadsWindows):
        super().__init__()
        self.backbone = backbone
        # The bound hook, not the module: the strategy's pooler weights belong to the head graph, not to this one.
        self.window_vectors = strategy.window_vectors

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (W, L, H)
        return self.window_vectors(hidden, attention_mask)  # (W, H)


class UnitHead(nn.Module):
    """The head graph: each document's unit vectors, mask and sizes -> logits (the strategy's pooling, then the
    head). Sizes of 1 weigh every unit the same, as no sizes do."""

    def __init__(self, strategy: nn.Module, head: nn.Linear):
        super().__init__()
        self.strategy, self.head = strategy, head

    def forward(self, vectors: torch.Tensor, mask: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        return self.head(self.strategy.pool(Units(vectors, mask, sizes)).vector)  # (B, N, H), (B, N) x2 -> (B, C)


def check_choices(format: str, quantize: str | None) -> None:
    if format not in FORMATS:
        raise LongbertError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise LongbertError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}, got {quantize!r}")


def exportable_strategies() -> list[str]:
    """The registered strategies whose windows are read independently (they are `ReadsWindows`)."""
    return strategies_with(ReadsWindows)


def check_exportable(strategy: nn.Module, name: str) -> None:
    if not isinstance(strategy, ReadsWindows):
        raise LongbertError(
            f"strategy {name} cannot be exported: it does not read a document as independent windows (it reads the "
            f"whole document in one pass, or carries a memory from segment to segment), so one per-window graph "
            f"cannot run it; export supports {', '.join(exportable_strategies())}")


def default_output(model_dir: Path) -> Path:
    return model_dir / "onnx"


def export_model(model_dir: str | Path, output: str | Path | None = None, format: str = "onnx",
                 quantize: str | None = None, parity_texts: list[str] | None = None,
                 parity_documents: int = PARITY_DOCUMENTS, calibrated: bool = True) -> ExportResult:
    """Export the model in `model_dir` (a run folder or a saved model folder) to `output` (default:
    <model_dir>/onnx), which must not exist yet; the folder appears whole or not at all. Parity is checked on
    `parity_texts`, or else on `parity_documents` test texts of the run's own data when the run folder names data
    that can be read (none: parity.json says why). Returns the folder and what parity.json holds. The settings in
    export.json carry the model's calibration (its temperatures), so the folder answers calibrated probabilities;
    `calibrated=False` exports the model without it (`ModelSettings.without_calibration`)."""
    check_choices(format, quantize)
    model_dir = Path(model_dir)
    output = named_folder(output, "--output") if output is not None else default_output(model_dir)
    if output.exists() and not output.is_dir():
        raise LongbertError(f"--output {output} is a file; export writes a folder: name one that does not exist")
    if output.exists():
        raise LongbertError(f"--output {output} already exists; remove it or name another folder")
    if not output.parent.is_dir():
        raise LongbertError(f"--output {output}: the folder {output.parent} does not exist")
    writable_folder(output.parent, "--output's folder")  # found before the work, not once it is done
    if parity_documents < 0:
        raise LongbertError(f"--parity-documents must be >= 0, got {parity_documents}")
    require("export", "longbert export")
    model = LongDocumentClassifier.from_pretrained(model_dir)
    if not calibrated:
        model.without_calibration()
    refuse_ensemble(model, str(model_dir), "ONNX export carries one model: export a member's run, or serve the "
                    "ensemble with `longbert serve`")
    check_exportable(model.strategy, model.settings.strategy.name)
    if model.lexical is not None:
        raise LongbertError(f"{model_dir} is a hybrid model: its TF-IDF half is not exported to ONNX; export the "
                            "run it was made from, or serve the hybrid with `longbert serve`")
    if parity_texts is not None:
        texts, source = parity_texts, "the texts given"
    else:
        texts, source = run_test_texts(model_dir, model, parity_documents)
    with atomic_folder(output) as staging:
        files = write_graphs(model, staging, quantize)
        model.tokenizer.save_pretrained(staging)
        info = {
            "format": EXPORT_FORMAT,
            "settings": model.settings.to_dict(),
            "hidden_size": model.backbone.config.hidden_size,
            **files,
            "exporter": f"torch.onnx.export(dynamo=True), torch {torch.__version__}",
            "quantization": None if quantize is None else ("onnxruntime.quantization.quantize_dynamic: int8 weights "
                                                           "(per channel), activations quantized at run time"),
            "source": str(model_dir),
        }
        (staging / EXPORT_FILE).write_text(json.dumps(info, indent=2))
        parity = parity_check(model, staging, texts) if texts else {"texts": 0, "note": source}
        parity["source"] = source
        (staging / PARITY_FILE).write_text(json.dumps(parity, indent=2))
    return ExportResult(output, parity)


@contextmanager
def _quiet_exporter():
    """torch.onnx's exporter and onnxruntime's quantizer warn about things that do not concern these graphs
    (torchvision ops, axis names, a pre-processing step whose symbolic shape inference fails on them anyway)."""
    loggers = [logging.getLogger("torch.onnx"), logging.getLogger()]  # the quantizer logs on the root logger
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def window_encoder(model) -> tuple[WindowEncoder, tuple[torch.Tensor, torch.Tensor]]:
    """The model's encoder graph as a module in eval mode, and example inputs to trace it with (export's ONNX graph,
    the OpenVINO runtime's). LoRA is folded into a copy of the weights: a plain encoder, as fast as the base. The
    example is two windows of different lengths (sizes of at least 2 that differ), so no axis is taken for a constant
    and every one stays dynamic."""
    backbone = model.backbone
    if model.settings.trains_lora:
        backbone = copy.deepcopy(backbone).merge_and_unload()
    input_ids = torch.full((2, 7), model.tokenizer.cls_token_id or 0, dtype=torch.long)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    return WindowEncoder(backbone, model.strategy).eval(), (input_ids, attention_mask)


def write_graphs(model, folder: Path, quantize: str | None) -> dict:
    """Write encoder.onnx, head.onnx (and encoder.int8.onnx) into `folder`; returns export.json's file entries."""
    encoder, (input_ids, attention_mask) = window_encoder(model)
    head = UnitHead(model.strategy, model.head).eval()
    hidden = model.backbone.config.hidden_size
    windows, tokens = Dim("windows"), Dim("tokens")
    documents, units = Dim("documents"), Dim("units")
    vectors = torch.zeros((2, 3, hidden))
    mask = torch.tensor([[True, True, True], [True, False, False]])
    sizes = torch.tensor([[40.0, 40.0, 7.0], [12.0, 0.0, 0.0]])
    with torch.no_grad(), _quiet_exporter():
        torch.onnx.export(encoder, (input_ids, attention_mask), str(folder / ENCODER_FILES["fp32"]), dynamo=True,
                          input_names=["input_ids", "attention_mask"], output_names=["vectors"],
                          dynamic_shapes=({0: windows, 1: tokens}, {0: windows, 1: tokens}),
                          external_data=False, verbose=False)
        torch.onnx.export(head, (vectors, mask, sizes), str(folder / ONNX_HEAD_FILE), dynamo=True,
                          input_names=["vectors", "mask", "sizes"], output_names=["logits"],
                          dynamic_shapes=({0: documents, 1: units}, {0: documents, 1: units}, {0: documents, 1: units}),
                          external_data=False, verbose=False)
    encoders = {"fp32": ENCODER_FILES["fp32"]}
    if quantize == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415 (optional extra: export)

        # Per-channel scales: on MiniLM (a trained IMDb head, 32 test reviews) one scale per weight matrix changed
        # 3 labels of 32 and probabilities by up to 0.10; per-channel none, and at most 0.037.
        with _quiet_exporter():
            quantize_dynamic(folder / ENCODER_FILES["fp32"], folder / ENCODER_FILES["int8"],
                             weight_type=QuantType.QInt8, per_channel=True)
        encoders["int8"] = ENCODER_FILES["int8"]
    return {"encoders": encoders, "head": ONNX_HEAD_FILE}


def run_test_texts(model_dir: Path, model, count: int) -> tuple[list[str], str]:
    """Up to `count` texts of the test split of the run's own data (seeded; half of them longer than 512 tokens
    where there are enough), and where they came from; ([], the reason) when there are none to read."""
    recipe_file = model_dir / RECIPE_FILE
    if count == 0:
        return [], "no parity texts asked for (--parity-documents 0)"
    if not recipe_file.is_file():
        return [], f"no parity texts: {model_dir} is not a run folder (no recipe.yaml); give some with --parity-texts"
    try:
        recipe = load_recipe(recipe_file, [])
        split = recipe.data.test_split
        if not split:
            return [], "no parity texts: the run's data has no test split; give some with --parity-texts"
        raw, _ = load_raw_splits(recipe.data, [split])
        texts = [t for t in raw[split][recipe.data.text_column] if isinstance(t, str) and t.strip()]
    except LongbertError as error:
        return [], f"no parity texts: the run's data cannot be read ({error}); give some with --parity-texts"
    random.Random(0).shuffle(texts)
    pool = texts[: 16 * count]
    _, lengths = model.tokenize(pool)
    long = [t for t, n in zip(pool, lengths) if n > LONG_TOKENS][: count // 2]
    chosen = long + [t for t, n in zip(pool, lengths) if n <= LONG_TOKENS][: count - len(long)]
    return chosen, f"{len(chosen)} texts of the test split of {recipe.data.path} (seeded sample)"


def parity_check(model, folder: Path, texts: list[str], batch_size: int = 8) -> dict:
    """The exported graphs in `folder` against the PyTorch model in fp32 (no autocast) on `texts`: per encoder
    precision, the share of texts given the same label(s) and the largest absolute difference of a probability. Both
    sides answer as their settings say, the same ones (export.json's are the model's): calibrated against calibrated,
    or uncalibrated against uncalibrated."""
    documents, lengths = model.tokenize(texts)
    reference = []
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        for start in range(0, len(documents), batch_size):
            reference.append(model.probabilities(model(documents[start : start + batch_size]).logits))
    reference = torch.cat(reference)  # (D, C)
    labels = lambda p: [r.get("labels", r.get("label")) for r in prediction_rows(model.settings, p, lengths)]
    expected = labels(reference)
    out = {"texts": len(texts), "long_texts": sum(n > LONG_TOKENS for n in lengths),
           "tokens_mean": round(sum(lengths) / len(lengths), 1), "reference": "PyTorch fp32 (no autocast)"}
    encoders = json.loads((folder / EXPORT_FILE).read_text())["encoders"]
    for precision in encoders:
        runtime = ExportedClassifier(folder, precision)
        got = torch.cat([runtime.probabilities(runtime.logits(documents[s : s + batch_size]))
                         for s in range(0, len(documents), batch_size)])
        out[f"onnx_{precision}"] = {
            "label_agreement": sum(a == b for a, b in zip(labels(got), expected)) / len(texts),
            "max_abs_probability_difference": float((got - reference).abs().max()),
            "mean_abs_probability_difference": float((got - reference).abs().mean()),
        }
    return out


def parity_line(parity: dict) -> str:
    """What parity.json says, in one line."""
    if not parity.get("texts"):
        return parity.get("note", "not checked")
    parts = [f"{key[len('onnx_'):]} labels agree on {100 * row['label_agreement']:.1f}%, max |Δp| "
             f"{row['max_abs_probability_difference']:.2g}" for key, row in parity.items() if key.startswith("onnx_")]
    checked = f"{parity['texts']} texts ({parity['long_texts']} over {LONG_TOKENS} tokens) against PyTorch fp32"
    return f"{checked}: " + "; ".join(parts)
