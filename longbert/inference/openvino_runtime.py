"""`--runtime openvino`: a saved classifier whose backbone passes run in OpenVINO on the CPU, and nothing else changed.

OpenVINO is Intel's inference runtime. It fuses what torch eager runs as separate kernels (attention, LayerNorm,
GELU, the casts) and picks its own kernels for the CPU it finds. `OpenVINOModel` converts the model's per-window
encoder (the backbone, then the strategy's `window_vectors`: the graph `longbert export` writes) with
`openvino.convert_model`, in memory, once, and compiles it for the CPU at one precision. Everything after the
window vectors stays the model's own PyTorch code: the strategy's pooling, the head, a hybrid's TF-IDF half and the
calibration. So the probabilities are the same function of the encoder's outputs as the PyTorch model's.

Only window strategies run here (truncate, chunk, sliding: those that are `ReadsWindows`). Their windows are read
independently, so one graph over a pass of windows serves any document length. bigbird reads a whole document in one
block-sparse pass, and recurrence and rmt carry a memory from segment to segment: neither is one fixed graph.

Precisions: fp32 (OpenVINO's f32 kernels), bf16 (its bf16 kernels, on CPUs with AVX512-BF16 or AMX), and auto, which
is bf16 where the CPU runs it fast (`longbert.utils.hardware.fast_bf16`) and fp32 elsewhere. OpenVINO itself would
pick bf16 on such a CPU even when asked for nothing; the precision is always set here, so fp32 means fp32.
"""

from __future__ import annotations

import warnings
from typing import Callable, Iterator

import torch

from longbert.errors import LongbertError
from longbert.inference.export import check_exportable, window_encoder
from longbert.inference.exported import check_auto_precision, is_export_folder
from longbert.modeling.classifier import ClassifierOutput, LongDocumentClassifier
from longbert.modeling.ensemble import refuse_ensemble
from longbert.modeling.reads_texts import ReadsTexts, check_texts, read_in_batches
from longbert.strategies.base import Units
from longbert.strategies.windows import run_cuts
from longbert.utils.extras import require
from longbert.utils.hardware import fast_bf16

RUNTIMES = ("torch", "openvino")
# What each precision asks OpenVINO's CPU plugin for (its INFERENCE_PRECISION_HINT).
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16"}


def check_runtime(runtime: str, name: str = "--runtime") -> None:
    if runtime not in RUNTIMES:
        raise LongbertError(f"{name} must be one of {', '.join(RUNTIMES)}, got {runtime!r}")


def check_export_runtime(model_dir, precision: str, runtime: str) -> bool:
    """True where `model_dir` is an exported folder, which runs in onnxruntime at the precision it was exported with:
    then `runtime` must be torch and `precision` auto (else one LongbertError line). False for any other folder."""
    if not is_export_folder(model_dir):
        return False
    if runtime != "torch":
        raise LongbertError(f"{model_dir} is an exported folder, which runs in onnxruntime; --runtime {runtime} "
                            "reads a run folder or a saved model folder")
    check_auto_precision(model_dir, precision)
    return True


def openvino_precision(requested: str) -> str:
    """auto -> bf16 where the CPU runs it fast, else fp32; fp32 and bf16 pass; anything else is one LongbertError."""
    if requested == "auto":
        return "bf16" if fast_bf16("cpu") else "fp32"
    if requested not in PRECISION_HINTS:
        raise LongbertError(f"--runtime openvino runs at fp32, bf16 or auto, not {requested!r} (int8 is "
                            "--runtime torch's, or an exported folder's)")
    return requested


class OpenVINOModel(ReadsTexts):
    """`model` (a LongDocumentClassifier of a window strategy, moved to the CPU) with its encoder passes in OpenVINO at
    `precision` (auto, fp32 or bf16; `self.precision` says what auto picked). `threads`: OpenVINO's inference
    threads (None: its default, every core). Reads as the model does: `predict`, `predictions_as_done`, `embed`, and
    `__call__(documents)` -> the model's ClassifierOutput."""

    def __init__(self, model: LongDocumentClassifier, precision: str = "auto", threads: int | None = None):
        require("openvino", "--runtime openvino")
        import openvino  # noqa: PLC0415 (optional extra: longbert[openvino])

        refuse_ensemble(model, "this model", "--runtime openvino runs one network: predict with a member, or with "
                        "--runtime torch")
        check_exportable(model.strategy, model.settings.strategy.name)
        self.precision = openvino_precision(precision)
        self.model = model.to("cpu").eval()
        self.encoder = compiled_encoder(openvino, converted_encoder(openvino, model), self.precision, threads)

    # What `predict`'s loop and its callers read of the model that runs (longbert.modeling.reads_texts).
    @property
    def settings(self):
        return self.model.settings

    @property
    def head(self):
        return self.model.head

    @property
    def ensemble(self):
        return None

    @property
    def strategy(self):
        return self.model.strategy

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def label_names(self) -> list[str]:
        return self.model.label_names

    def tokenize(self, texts: list[str]) -> tuple[list[torch.Tensor], list[int]]:
        return self.model.tokenize(texts)

    def probabilities(self, logits: torch.Tensor, calibrated: bool = True) -> torch.Tensor:
        return self.model.probabilities(logits, calibrated)

    def without_calibration(self) -> OpenVINOModel:
        """This runtime answering the probabilities its logits give (in place; returned)."""
        self.model.without_calibration()
        return self

    def encode(self, documents: list[torch.Tensor]) -> Units:
        """B documents' content ids -> Units (B, N, H): the strategy's windows, in the passes the model would lay out
        (`run_passes`, the same budget), each pass through the compiled encoder."""
        cuts = [self.strategy.windows(ids) for ids in documents]
        return run_cuts(cuts, self.strategy.special, self.settings.budget, self.encoder)  # (B, N, H)

    def __call__(self, documents: list[torch.Tensor]) -> ClassifierOutput:
        """The model's forward over units from `encode` (pooling, head, a hybrid's TF-IDF half in PyTorch)."""
        with torch.no_grad():
            return self.model(documents=documents, units=self.encode(documents))

    def read_as_done(self, texts: list[str], batch_size: int, precision: str,
                     compute: Callable) -> Iterator[tuple[int, list, int]]:
        """`ReadsTexts`' one loop. `precision` must be auto or the one this runtime was compiled at."""
        check_texts(texts, batch_size)
        if precision not in ("auto", self.precision):
            raise LongbertError(f"this OpenVINO runtime was compiled at {self.precision}; it cannot read at "
                                f"{precision}")
        disabled = torch.autocast("cpu", enabled=False)  # the pooling and head in fp32, whatever the encoder ran in
        yield from read_in_batches(self.model, texts, batch_size, disabled, lambda batch: compute(self, batch))


def converted_encoder(openvino, model: LongDocumentClassifier):
    """The model's window encoder (`window_encoder`: what export writes, LoRA merged into a copy) converted by
    OpenVINO, in memory: a graph of input_ids (W, L), attention_mask (W, L) -> vectors (W, H), both axes dynamic."""
    encoder, example = window_encoder(model)
    dynamic = [openvino.PartialShape([-1, -1]), openvino.PartialShape([-1, -1])]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape checks in transformers' mask code
        return openvino.convert_model(encoder, example_input=example, input=dynamic)


def compiled_encoder(openvino, graph, precision: str,
                     threads: int | None) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """An encoder `graph` (`converted_encoder`'s) compiled for the CPU at `precision` (fp32 or bf16): a function
    (input_ids (W, L), attention_mask (W, L)) -> vectors (W, H) float32, as `run_passes` calls it."""
    config = {"INFERENCE_PRECISION_HINT": PRECISION_HINTS[precision], "PERFORMANCE_HINT": "LATENCY"}
    if threads is not None:
        config["INFERENCE_NUM_THREADS"] = threads
    compiled = openvino.Core().compile_model(graph, "CPU", config)
    request = compiled.create_infer_request()

    def run(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        result = request.infer({0: input_ids.numpy(), 1: attention_mask.numpy()})
        return torch.from_numpy(result[0].copy())  # the request's buffer is reused by its next call

    return run
