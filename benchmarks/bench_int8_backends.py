"""Which int8 path for `--precision int8` on the CPU: torch's dynamic quantization (torch.ao, deprecated), or
torchao's `quantize_` with Int8DynamicActivationInt8WeightConfig, its maintained successor, in eager mode as predict
runs. On the packaged MiniLM backbone (real weights), a batch of 512-token windows of real IMDb text: the time of a
forward pass (median of --repeats after one warm-up) and how far each int8 path's mean-pooled window
vectors are from fp32's (cosine similarity, worst window).

    pip install torchao==0.18.0            # not a longbert dependency; the benchmark skips it when absent
    python benchmarks/bench_int8_backends.py --windows 16 --repeats 5 --json benchmarks/results/int8-backends.json
    python benchmarks/bench_int8_backends.py --compile --json benchmarks/results/int8-backends-compiled.json
    python benchmarks/bench_int8_backends.py --onnx --json benchmarks/results/int8-backends-onnx.json

--compile adds torchao's int8 and fp32 under `torch.compile`, with what compiling costs: the first call at the
batch's shape, and the first call at a second shape (half the windows, 300 tokens), which compiles again, as a
predict over documents of other lengths would.

--onnx adds onnxruntime: the backbone exported as `longbert export` exports its encoder (torch.onnx, dynamo=True),
run in fp32 and dynamically quantized by onnxruntime's quantizer (int8 weights per channel, as `export --quantize
int8` makes them), with the seconds that exporting and quantizing cost once.

Run it alone: it times the CPU.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from longbert.modeling.backbone import load_backbone
from longbert.utils.hardware import describe_machine

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--windows", type=int, default=16)
parser.add_argument("--repeats", type=int, default=5)
parser.add_argument("--data", type=Path, default=Path("../shared/data/imdb/test.jsonl.gz"))
parser.add_argument("--json", type=Path, default=None)
parser.add_argument("--compile", action="store_true", help="also torchao int8 and fp32 under torch.compile")
parser.add_argument("--onnx", action="store_true", help="also onnxruntime fp32 and its dynamically quantized int8")
args = parser.parse_args()

torch.manual_seed(0)
backbone, tokenizer = load_backbone("minilm")
backbone.eval()
texts = []
with (gzip.open(args.data, "rt") if args.data.suffix == ".gz" else open(args.data)) as lines:
    for line in lines:
        texts.append(json.loads(line)["text"])
        if len(texts) == args.windows:
            break
batch = tokenizer(texts, padding="max_length", truncation=True, max_length=512, return_tensors="pt")


def vectors(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state  # (W, L, H)
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return (hidden * mask).sum(1) / mask.sum(1)  # (W, H)


def timed(model: nn.Module) -> float:
    vectors(model)  # warm-up
    times = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        vectors(model)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def torch_ao(model: nn.Module) -> nn.Module:
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(copy.deepcopy(model), {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)


def torchao_int8(model: nn.Module) -> nn.Module | None:
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError:
        return None
    copied = copy.deepcopy(model)
    quantize_(copied, Int8DynamicActivationInt8WeightConfig())
    return copied


class Hidden(nn.Module):
    """The backbone's last hidden states from (input_ids, attention_mask): what the ONNX graph computes."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class OnnxBackbone:
    """An onnxruntime session called as the backbone is (`model(**batch).last_hidden_state`)."""

    def __init__(self, path: Path):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def __call__(self, input_ids, attention_mask, **_):
        hidden = self.session.run(None, {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()})[0]
        return SimpleNamespace(last_hidden_state=torch.from_numpy(hidden))


def onnx_paths(model: nn.Module) -> dict | None:
    """{"onnxruntime fp32": (backbone, seconds to export), "onnxruntime int8 ...": (backbone, seconds to export and
    quantize)}, or None without onnxruntime."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from torch.export import Dim
    except ImportError:
        return None
    folder = Path(tempfile.mkdtemp(prefix="bench-int8-onnx-"))
    started = time.perf_counter()
    example = (batch["input_ids"][:2, :7], batch["attention_mask"][:2, :7])
    windows, tokens = Dim("windows"), Dim("tokens")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Hidden(model).eval(), example, str(folder / "fp32.onnx"), dynamo=True,
                          input_names=["input_ids", "attention_mask"], output_names=["hidden"],
                          dynamic_shapes=({0: windows, 1: tokens}, {0: windows, 1: tokens}), external_data=False,
                          verbose=False)
    exported = time.perf_counter() - started
    quantize_dynamic(folder / "fp32.onnx", folder / "int8.onnx", weight_type=QuantType.QInt8, per_channel=True)
    quantized = time.perf_counter() - started
    return {"onnxruntime fp32": (OnnxBackbone(folder / "fp32.onnx"), exported),
            "onnxruntime int8 (dynamic, per channel)": (OnnxBackbone(folder / "int8.onnx"), quantized)}


def compiled(build):
    """`build` then torch.compile, and (the model, seconds of its first call, seconds of its first call at a second
    shape) — or None when `build` gives none."""
    model = build(backbone)
    if model is None:
        return None
    model = torch.compile(model)
    started = time.perf_counter()
    vectors(model)
    first = time.perf_counter() - started
    other = tokenizer(texts[: max(1, len(texts) // 2)], padding="max_length", truncation=True, max_length=300,
                      return_tensors="pt")
    started = time.perf_counter()
    with torch.no_grad():
        model(**other)
    return model, first, time.perf_counter() - started


reference = vectors(backbone)
results = {"machine": describe_machine(), "windows": args.windows, "tokens_per_window": 512,
           "repeats": args.repeats, "torch": torch.__version__, "paths": {}}
for name, build in (("fp32", lambda m: m), ("torch.ao dynamic (per channel)", torch_ao),
                    ("torchao Int8DynamicActivationInt8Weight", torchao_int8)):
    model = build(backbone)
    if model is None:
        print(f"{name}: not installed, skipped")
        continue
    seconds = timed(model)
    cosine = nn.functional.cosine_similarity(vectors(model), reference, dim=-1)
    results["paths"][name] = {"seconds": round(seconds, 4), "worst_cosine": round(float(cosine.min()), 6)}
    print(f"{name}: {seconds:.3f} s a batch ({args.windows} x 512 tokens), worst cosine to fp32 "
          f"{float(cosine.min()):.5f}")
for name, build in (("fp32, compiled", lambda m: copy.deepcopy(m)),
                    ("torchao Int8DynamicActivationInt8Weight, compiled", torchao_int8)) if args.compile else ():
    built = compiled(build)
    if built is None:
        print(f"{name}: not installed, skipped")
        continue
    model, first, second_shape = built
    seconds = timed(model)
    cosine = nn.functional.cosine_similarity(vectors(model), reference, dim=-1)
    results["paths"][name] = {"seconds": round(seconds, 4), "worst_cosine": round(float(cosine.min()), 6),
                              "first_call_seconds": round(first, 2),
                              "first_call_at_a_second_shape_seconds": round(second_shape, 2)}
    print(f"{name}: {seconds:.3f} s a batch, worst cosine to fp32 {float(cosine.min()):.5f}; first call "
          f"{first:.1f} s, first call at a second shape {second_shape:.1f} s")
for name, (model, made) in (onnx_paths(backbone) or {}).items() if args.onnx else ():
    seconds = timed(model)
    cosine = nn.functional.cosine_similarity(vectors(model), reference, dim=-1)
    results["paths"][name] = {"seconds": round(seconds, 4), "worst_cosine": round(float(cosine.min()), 6),
                              "seconds_to_make": round(made, 2)}
    print(f"{name}: {seconds:.3f} s a batch, worst cosine to fp32 {float(cosine.min()):.5f}; made in {made:.1f} s")
if args.json:
    args.json.write_text(json.dumps(results, indent=2) + "\n")
