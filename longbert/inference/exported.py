"""An exported model folder (written by `longbert export`, longbert/inference/export.py) and the runtime that reads
documents of any length with it through onnxruntime, without the PyTorch model.

    <dir>/export.json          what the folder holds: the model's settings (as in longbert_config.json), the hidden
                               size, the graph files, how they were made
    <dir>/encoder.onnx         one pass of windows -> one vector per window:
                               input_ids (W, L) int64, attention_mask (W, L) int64 -> vectors (W, H) float32
                               (the backbone and the strategy's token pooling, cls or mean; W and L dynamic)
    <dir>/encoder.int8.onnx    with `--quantize int8`: the same graph with int8 weights (dynamic quantization)
    <dir>/head.onnx            the window vectors of each document -> logits:
                               vectors (B, N, H) float32, mask (B, N) bool, sizes (B, N) float32 -> logits (B, C)
                               (the strategy's unit pooling and the classification head; B and N dynamic; sizes:
                               how much each window counts in mean pooling, `Units.sizes`, 1 where the strategy
                               gives none; a graph whose pooling does not use an input does not have it)
    <dir>/tokenizer files
    <dir>/parity.json          the graphs against PyTorch fp32 on real texts (see export.py)

`ExportedClassifier.predict` tokenizes with the saved tokenizer (cut at the settings' max_document_tokens, as the
PyTorch model does), cuts each document with its strategy's own `windows` hook, lays the windows out in the same
bounded passes (`run_passes`), runs the encoder graph pass by pass and the head graph once per batch, and returns
the rows `LongDocumentClassifier.predict` returns, its probabilities calibrated by the temperatures export.json's
settings carry, as the PyTorch model's are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import torch

from longbert.config import is_multi_label
from longbert.data.documents import tokenize_documents
from longbert.errors import LongbertError, first_line
from longbert.modeling.backbone import load_tokenizer, prepare_tokenizer
from longbert.modeling.calibration import answered_probabilities
from longbert.modeling.reads_texts import (
    check_min_confidence,
    check_texts,
    longest_first,
    prediction_row,
)
from longbert.modeling.settings import ModelSettings
from longbert.strategies.base import ReadsWindows, SpecialTokens
from longbert.strategies.registry import build_strategy
from longbert.strategies.windows import run_cuts
from longbert.utils.extras import require
from longbert.utils.folders import EXPORT_FILE

ENCODER_FILES = {"fp32": "encoder.onnx", "int8": "encoder.int8.onnx"}
EXPORT_FORMAT = 1


def is_export_folder(folder: str | Path) -> bool:
    return (Path(folder) / EXPORT_FILE).is_file()


def check_auto_precision(folder: str | Path, precision: str) -> None:
    """An exported folder runs at the precision it was exported with: anything but `auto` is one LongbertError line."""
    if precision != "auto":
        raise LongbertError(f"{folder} is an exported folder: it runs at the precision it was exported with; "
                            "--precision applies to PyTorch model folders")


# The tokenizer files `longbert export` saves beside the graphs (the vocabulary, and which ids are [CLS], [SEP], [PAD]).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class ExportedClassifier:
    """Run an exported folder with onnxruntime. `precision`: 'fp32', 'int8', or None for the int8 encoder when the
    folder has one. `threads`: onnxruntime's intra-op threads (None: its default, every core)."""

    def __init__(self, folder: str | Path, precision: str | None = None, threads: int | None = None):
        require("export", "running an exported model")
        import onnxruntime  # noqa: PLC0415 (optional extra: longbert[export])

        self.folder = Path(folder)
        info = read_export_info(self.folder)
        self.info = info
        self.settings = ModelSettings.from_dict(info["settings"], f"{self.folder / EXPORT_FILE} (settings)")
        self.tokenizer = prepare_tokenizer(load_tokenizer(self.folder))
        self.special = SpecialTokens.from_tokenizer(self.tokenizer)
        # The strategy module is built only for its `windows` hook (its pooler's weights live in head.onnx); building
        # it initialises those weights, which must not move the caller's random numbers.
        with torch.random.fork_rng(devices=[]):
            self.strategy = build_strategy(self.settings.strategy, info["hidden_size"], self.special,
                                           self.settings.budget)
        if not isinstance(self.strategy, ReadsWindows):  # export refuses these; a folder edited by hand may not
            raise LongbertError(f"{self.folder / EXPORT_FILE} is damaged: strategy {self.settings.strategy.name} does "
                                "not read independent windows, which an exported model needs")
        encoders = info["encoders"]
        self.precision = precision or ("int8" if "int8" in encoders else "fp32")
        if self.precision not in encoders:
            raise LongbertError(f"{self.folder} has no {self.precision} encoder; it has {', '.join(sorted(encoders))}")
        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        window = torch.tensor([[self.special.cls_id, self.special.sep_id]]).numpy()  # (1, 2): an empty document
        self.encoder = Graph(self.folder / encoders[self.precision], options, ENCODER_INPUTS, "vectors",
                             {"input_ids": window, "attention_mask": window * 0 + 1})
        self.head = Graph(self.folder / info["head"], options, HEAD_INPUTS, "logits",
                          {"vectors": torch.zeros(1, 1, info["hidden_size"]).numpy(),
                           "mask": torch.ones(1, 1, dtype=torch.bool).numpy(), "sizes": torch.ones(1, 1).numpy()})

    @property
    def label_names(self) -> list[str]:
        return self.settings.label_names

    @property
    def multi_label(self) -> bool:
        return is_multi_label(self.settings.problem_type)

    def tokenize(self, texts: list[str]) -> tuple[list[torch.Tensor], list[int]]:
        """Texts -> ((T,) content-id tensors cut at max_document_tokens, full lengths with [CLS]/[SEP])."""
        ids, lengths = tokenize_documents(self.tokenizer, texts, self.settings.max_document_tokens)
        return [torch.tensor(d, dtype=torch.long) for d in ids], lengths

    def logits(self, documents: list[torch.Tensor]) -> torch.Tensor:
        """B documents' content ids -> (B, C) logits, through both graphs."""
        cuts = [self.strategy.windows(ids) for ids in documents]  # (windows, sizes) of each document

        def run(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:  # (W, L) -> (W, H)
            return self.encoder.run({"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()})

        units = run_cuts(cuts, self.special, self.settings.budget, run)  # (B, N, H)
        sizes = units.mask.float() if units.sizes is None else units.sizes  # (B, N); 1 = every unit counts the same
        return self.head.run({"vectors": units.vectors.numpy(), "mask": units.mask.numpy(), "sizes": sizes.numpy()})

    def probabilities(self, logits: torch.Tensor, calibrated: bool = True) -> torch.Tensor:
        """(B, C) logits -> what the model answers: calibrated by the temperatures its settings carry, as the PyTorch
        model's (`longbert.modeling.calibration.answered_probabilities`)."""
        return answered_probabilities(self.settings, logits, calibrated)

    def without_calibration(self) -> ExportedClassifier:
        """This runtime, answering the probabilities its logits give (in place; returned), as
        `LongDocumentClassifier.without_calibration`."""
        self.settings = self.settings.without_calibration()
        return self

    def predict(self, texts: list[str], batch_size: int = 16, min_confidence: float | None = None) -> list[dict]:
        """Texts -> the rows `LongDocumentClassifier.predict` gives: label (or labels), probabilities, n_tokens (and
        'abstained' with `min_confidence`)."""
        check_min_confidence(min_confidence)
        rows: list = [None] * len(texts)
        for index, row in self.predictions_as_done(texts, batch_size, min_confidence=min_confidence):
            rows[index] = row
        return rows

    def predictions_as_done(self, texts: list[str], batch_size: int = 16, precision: str = "auto",
                            min_confidence: float | None = None) -> Iterator[tuple[int, dict]]:
        """(index into `texts`, its row) batch by batch, longest texts first, as
        `LongDocumentClassifier.predictions_as_done` gives them (what `longbert predict` reads). `precision` must be
        auto: the folder runs at the precision it was exported with."""
        check_auto_precision(self.folder, precision)
        check_texts(texts, batch_size)
        check_min_confidence(min_confidence)
        documents, lengths = self.tokenize(texts)
        for batch in longest_first(documents, batch_size):
            probabilities = self.probabilities(self.logits([documents[i] for i in batch]))  # (B, C)
            for index, p in zip(batch, probabilities.tolist()):
                yield index, prediction_row(self.settings, p, lengths[index], min_confidence)


class Graph:
    """One graph file of an exported folder in an onnxruntime session: `run(feed) -> its one output` as a tensor.
    A file onnxruntime cannot load, one that is not the graph its name says (other inputs or outputs), or one that
    fails on `probe` (a one-window feed, run once when the file is opened) is damaged: one LongbertError line naming
    the file instead of onnxruntime's traceback at the first request."""

    def __init__(self, path: Path, options, inputs: tuple[str, ...], output: str, probe: dict):
        import onnxruntime  # noqa: PLC0415 (optional extra: longbert[export])

        self.path, self.output = path, output
        try:
            self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime's errors (InvalidProtobuf, Fail, ...) share no base but Exception
            raise LongbertError(f"{path} is damaged: onnxruntime cannot load it ({first_line(error)})") from None
        self.inputs = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        if inputs[0] not in self.inputs or not set(self.inputs) <= set(inputs) or output not in outputs:
            raise LongbertError(f"{path} is damaged: a graph with inputs {', '.join(self.inputs)} and outputs "
                                f"{', '.join(outputs)}, where the export writes inputs {', '.join(inputs)} (a head may "
                                f"leave some out) and output {output}")
        try:
            self.run(probe)
        except Exception as error:
            raise LongbertError(f"{path} is damaged: onnxruntime cannot run it on one window "
                                f"({first_line(error)})") from None

    def run(self, feed: dict) -> torch.Tensor:
        return torch.from_numpy(self.session.run([self.output], {name: feed[name] for name in self.inputs})[0])


ENCODER_INPUTS = ("input_ids", "attention_mask")
HEAD_INPUTS = ("vectors", "mask", "sizes")


def read_export_info(folder: Path) -> dict:
    """export.json of an exported folder, checked for what the runtime needs (one LongbertError line otherwise)."""
    path = folder / EXPORT_FILE
    if not path.is_file():
        raise LongbertError(f"{folder} is not a longbert export folder (no {EXPORT_FILE}); `longbert export` writes "
                            "one")
    try:
        info = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise LongbertError(f"{path} is damaged: {error}") from None
    if not isinstance(info, dict) or info.get("format") != EXPORT_FORMAT:
        raise LongbertError(f"{path} was written by another longbert export format; this longbert reads format "
                            f"{EXPORT_FORMAT}")
    missing = [k for k in ("settings", "hidden_size", "encoders", "head") if k not in info]
    if missing:
        raise LongbertError(f"{path} is damaged: no {', '.join(missing)}")
    for name in [*info["encoders"].values(), info["head"], *TOKENIZER_FILES]:
        if not (folder / name).is_file():
            raise LongbertError(f"{folder} is incomplete: no {name}")
    return info
