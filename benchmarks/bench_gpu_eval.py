"""Evaluation and predict at a GPU's speed: how fast one evaluation pass over IMDb's test reviews reads on a GPU
(truncate and chunk, MiniLM in bf16), where the time goes (torch.profiler), and what `predict` does with all 25,000.

    python benchmarks/bench_gpu_eval.py --part eval -o benchmarks/results/gpu-eval.json      # the pass, several ways
    python benchmarks/bench_gpu_eval.py --part predict -o benchmarks/results/gpu-predict.json

`--part eval` runs `predict_dataset` (the pass compare's and train's evaluations make) over the first `--documents`
test reviews, once per setting in `--settings` (name=overrides;name=...), after one warm-up pass of 256 reviews, and
then profiles one pass of `--profile-documents` reviews. Counted by a hook on the backbone: the passes, the real and
padded tokens read, and the matrix arithmetic done (2 x the weights of each layer's linear maps per padded token,
plus 4 L^2 H per layer and window for attention), against the GPU's dense bf16 peak (989 TFLOP/s for an H100 or
H200 SXM, NVIDIA's figure). `--part predict` times `model.predict` over all the test reviews (tokenizing included)
and its peak GPU memory. Speed does not depend on the weights, so a backbone of MiniLM's shape with random weights
measures the same as MiniLM; the record says which was used.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import torch

DENSE_BF16_PEAK = {"H100": 989e12, "H200": 989e12}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU only to try the script out: it measures a GPU


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def reset_peak() -> None:
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_mb() -> float | None:
    return torch.cuda.max_memory_allocated() / 2**20 if DEVICE == "cuda" else None


def reviews(data: Path, count: int) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    with gzip.open(data / "imdb" / "test.jsonl.gz", "rt") as f:
        for line in f:
            row = json.loads(line)
            texts.append(row["text"])
            labels.append(int(row["label"]))
            if len(texts) == count:
                break
    return texts, labels


class PassCounter:
    """Counts what goes through the backbone: passes, real and padded tokens, matrix FLOPs (on the GPU, no sync)."""

    def __init__(self, backbone):
        config = backbone.config
        self.layers, self.hidden = config.num_hidden_layers, config.hidden_size
        self.per_token = 2 * self.layers * (4 * self.hidden ** 2 + 2 * self.hidden * config.intermediate_size)
        self.passes, self.padded, self.flops, self.real = 0, 0, 0.0, None
        self.hook = backbone.register_forward_pre_hook(self.record, with_kwargs=True)

    def record(self, module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is None:
            return
        w, length = mask.shape[0], mask.shape[-1]
        self.passes += 1
        self.padded += w * length
        self.flops += w * length * self.per_token + self.layers * 4 * w * length ** 2 * self.hidden
        real = mask.sum()
        self.real = real if self.real is None else self.real + real

    def result(self, seconds: float, peak: float) -> dict:
        real = int(self.real) if self.real is not None else 0
        return {"passes": self.passes, "real_tokens": real, "padded_tokens": self.padded,
                "padding_share": 1 - real / self.padded if self.padded else None,
                "real_tokens_per_second": real / seconds, "tflops_per_second": self.flops / seconds / 1e12,
                "share_of_bf16_peak": self.flops / seconds / peak}


def build(strategy: str, backbone: str, overrides: list[str]):
    from longbert.config import load_recipe
    from longbert.modeling.classifier import LongDocumentClassifier

    base = {"truncate": ["strategy.name=truncate"],
            "chunk": ["strategy.name=chunk", "strategy.window=510", "strategy.pooling=mean",
                      "strategy.token_pooling=mean"]}[strategy]
    recipe = load_recipe(None, [f"backbone.name={backbone}", "backbone.attention_dropout=0.0", *base, *overrides])
    torch.manual_seed(0)
    return LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"]).to(DEVICE).eval()


def dataset_of(model, texts: list[str], labels: list[int]):
    from datasets import Dataset

    documents, lengths = model.tokenize(texts)
    return Dataset.from_dict({"input_ids": [d.tolist() for d in documents], "labels": labels, "n_tokens": lengths})


def eval_part(args, peak: float) -> dict:
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel

    from longbert.evaluation.split_pass import predict_dataset
    from longbert.strategies import windows

    texts, labels = reviews(args.data, args.documents)
    rows, profiles = [], {}
    rounding = getattr(windows, "ACCELERATOR_WIDTH_MULTIPLE", 1)
    for strategy in args.strategies.split(","):
        data = None
        for setting in args.settings.split(";"):
            name, _, extra = setting.partition("=")
            overrides = [o for o in extra.split(",") if o and ":" not in o]
            knobs = dict(o.split(":", 1) for o in extra.split(",") if ":" in o)
            batch = int(knobs.get("batch", 64))
            windows.ACCELERATOR_WIDTH_MULTIPLE = int(knobs.get("round", rounding))
            attention = (sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]) if knobs.get("sdpa") == "efficient"
                         else contextlib.nullcontext())
            model = build(strategy, args.backbone, overrides)
            if data is None:
                started = time.perf_counter()
                data = dataset_of(model, texts, labels)
                tokenize_seconds = time.perf_counter() - started
            with attention:
                predict_dataset(model, data.select(range(min(256, len(data)))), batch)  # warm-up
                sync()
                reset_peak()
                counter = PassCounter(model.backbone)
                started = time.perf_counter()
                out = predict_dataset(model, data, batch)
                sync()
                seconds = time.perf_counter() - started
            counter.hook.remove()
            row = {"strategy": strategy, "setting": name, "overrides": overrides, "knobs": knobs, "batch_size": batch,
                   "documents": len(data), "seconds": seconds, "documents_per_second": len(data) / seconds,
                   "tokenize_seconds": tokenize_seconds, "peak_gpu_memory_mb": peak_mb(),
                   **counter.result(seconds, peak),
                   # to compare settings (and code versions) on the same documents: class 1's probability, 4 places
                   "p1": [round(float(p), 4) for p in out["probabilities"][:, 1]]}
            rows.append(row)
            print(f"{strategy:<9} {name:<14} batch {batch:>4}: {seconds:6.2f} s, {row['documents_per_second']:7.0f} "
                  f"docs/s, {row['real_tokens_per_second']:9.0f} real tokens/s, {row['passes']:5d} passes, padding "
                  f"{100 * row['padding_share']:4.1f}%, {row['tflops_per_second']:6.1f} TFLOP/s "
                  f"({100 * row['share_of_bf16_peak']:.2f}% of peak), {row['peak_gpu_memory_mb']} MB", flush=True)
            if args.profile_documents and name == args.settings.split(";")[-1].partition("=")[0]:
                profiles[strategy] = profile_pass(model, data.select(range(args.profile_documents)), batch)
            del model
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    return {"rows": rows, "profiles": profiles}


def profile_pass(model, data, batch: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from longbert.evaluation.split_pass import predict_dataset

    sync()
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        predict_dataset(model, data, batch)
        sync()
    wall = time.perf_counter() - started
    events = prof.key_averages()
    device_time = lambda e: getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0))
    kernels = sum(device_time(e) for e in events) / 1e6
    top = lambda key: [{"op": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1e3,
                        "self_gpu_ms": device_time(e) / 1e3}
                       for e in sorted(events, key=key, reverse=True)[:15]]
    print(f"  profiled {len(data)} documents: wall {wall:.2f} s, GPU busy {kernels:.2f} s "
          f"({100 * kernels / wall:.0f}%)", flush=True)
    for row in top(device_time)[:8]:
        print(f"    gpu {row['op'][:60]:<60} {row['self_gpu_ms']:8.1f} ms {row['calls']:6d} calls")
    for row in top(lambda e: e.self_cpu_time_total)[:8]:
        print(f"    cpu {row['op'][:60]:<60} {row['self_cpu_ms']:8.1f} ms {row['calls']:6d} calls")
    return {"documents": len(data), "wall_seconds": wall, "gpu_busy_seconds": kernels,
            "by_gpu_time": top(device_time), "by_cpu_time": top(lambda e: e.self_cpu_time_total)}


def predict_part(args, peak: float) -> dict:
    texts, _ = reviews(args.data, args.documents)
    rows = []
    for strategy in args.strategies.split(","):
        model = build(strategy, args.backbone, [])
        model.predict(texts[:256], args.batch_size)  # warm-up
        sync()
        reset_peak()
        started = time.perf_counter()
        out = model.predict(texts, args.batch_size)
        sync()
        seconds = time.perf_counter() - started
        rows.append({"strategy": strategy, "documents": len(out), "batch_size": args.batch_size, "seconds": seconds,
                     "documents_per_second": len(out) / seconds,
                     "peak_gpu_memory_mb": peak_mb()})
        print(f"predict {strategy:<9}: {len(out)} reviews in {seconds:.1f} s, {len(out) / seconds:.0f} docs/s, "
              f"peak {rows[-1]['peak_gpu_memory_mb']} MB", flush=True)
        if args.save_model:
            model.save_pretrained(Path(args.save_model) / strategy)
        del model
    return {"rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["eval", "predict"], default="eval")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--strategies", default="truncate,chunk")
    parser.add_argument("--settings", default="default=", help="name=override,override,batch:N;name=...")
    parser.add_argument("--documents", type=int, default=25000)
    parser.add_argument("--profile-documents", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--save-model", help="(predict) save each model here, for bench_serve.py")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"
    peak = next((v for k, v in DENSE_BF16_PEAK.items() if k in name), 989e12)
    import transformers

    import longbert

    machine = {"longbert": str(Path(longbert.__file__).parent), "gpu": name, "torch": torch.__version__,
               "cuda": torch.version.cuda, "transformers": transformers.__version__, "python": sys.version.split()[0],
               "bf16_peak_flops": peak}
    result = eval_part(args, peak) if args.part == "eval" else predict_part(args, peak)
    result = {"command": " ".join(["python", "benchmarks/bench_gpu_eval.py", *sys.argv[1:]]), "machine": machine,
              "backbone": args.backbone, **result}
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
