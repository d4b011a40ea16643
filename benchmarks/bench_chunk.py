"""Chunk inference throughput on real IMDb test reviews longer than 512 tokens, with the real MiniLM backbone,
against this CPU's peak matmul throughput, in fp32, bf16 autocast and bf16 weights.

    python benchmarks/bench_chunk.py                  # writes benchmarks/results/chunk.json
    python benchmarks/bench_chunk.py --quick          # fewer documents and repeats, for checking the script
    python benchmarks/bench_chunk.py --emulate-avx2   # AVX-512 masked as in bench_belt.py (isolated.AVX2_ENV):
                                                      # benchmarks/results/chunk-avx2-emulated.json

FLOPs are counted from the windows' shapes: every Linear layer (2 * in * out per token) plus attention scores and
the weighted sum (2 * 2 * L * H per token per layer). "Useful" FLOPs count each window at its own length; "executed"
ones at its pass's padded length. The target is judged on useful FLOPs.

The peak, per dtype: the fastest of torch.matmul on tensors of that dtype at the encoder's own GEMM shapes (a pass
of 16 windows x 512 tokens through each Linear layer: 8192 x 384 @ 384 x 384, 384 x 1536 and 1536 x 384), and a
4096 x 4096 square one for reference; no autocast (autocast over fp32 inputs adds the casts to the matmul's time,
which measured 406 GFLOP/s instead of 700-800 on this CPU).
Three ways to run the model: fp32; bf16 autocast (what `predict` and evaluation do); bf16 weights (the model cast
to bf16, no autocast: no casts per call, LayerNorm and softmax in bf16 too). The script follows `mixed_precision:
auto`: the two bf16 ways run only where auto picks bf16 (on a CPU without fast bf16 they would be emulated, slowly,
and say nothing about what a user gets there); every run records the machine's CPU capability and auto's choice.
Targets set for chunk inference: useful FLOP/s >= 65% of the bf16 peak (the best bf16 way) and >= 75% of the fp32
peak (fp32).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from isolated import auto_precision, rerun_with_avx2

from longbert.config import load_recipe
from longbert.data.documents import tokenize_documents
from longbert.data.sources import resolve_data_path
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.utils.hardware import describe_machine

RESULTS = Path(__file__).resolve().parent / "results"


def matmul_rate(dtype: torch.dtype, m: int, k: int, n: int, repeats: int) -> float:
    """FLOP/s of the fastest of `repeats` (m, k) @ (k, n) matmuls on `dtype` tensors, after a warm-up."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    torch.matmul(a, b)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * m * k * n / best


def peak_matmul(config, dtype: torch.dtype, repeats: int, tokens: int = 16 * 512) -> dict:
    """Matmul FLOP/s on `dtype` tensors at the encoder's Linear shapes for a pass of `tokens` tokens, and at a
    4096 x 4096 square; `peak` is the fastest."""
    h, inter = config.hidden_size, config.intermediate_size
    shapes = {f"{tokens}x{h}@{h}x{h}": (tokens, h, h), f"{tokens}x{h}@{h}x{inter}": (tokens, h, inter),
              f"{tokens}x{inter}@{inter}x{h}": (tokens, inter, h), "4096x4096@4096x4096": (4096, 4096, 4096)}
    rates = {name: matmul_rate(dtype, *shape, repeats) for name, shape in shapes.items()}
    return {"peak": max(rates.values()), "by_shape": rates}


def long_reviews(tokenizer, count: int) -> list[torch.Tensor]:
    folder = resolve_data_path("imdb")
    texts = []
    with gzip.open(folder / "test.jsonl.gz", "rt") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
    ids, lengths = tokenize_documents(tokenizer, texts[::7][:4000], 10**6)
    chosen = [torch.tensor(d) for d, n in zip(ids, lengths) if n > 512][:count]
    return chosen


def forward_flops(config, window_lengths: list[list[int]], padded: bool) -> float:
    """FLOPs of the encoder over passes of windows: as run (`padded`: each window padded to its pass's longest)
    or useful (each window at its own length)."""
    h, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_token_linear = 2 * (4 * h * h + 2 * h * inter)
    total = 0.0
    for lengths in window_lengths:
        for length in lengths:
            n = max(lengths) if padded else length
            total += layers * (n * per_token_linear + 4 * n * n * h)
    return total


@contextmanager
def recorded_passes():
    """While inside: every pass that longbert.strategies.windows plans is recorded, as the padded lengths of its
    windows, in the list this yields (clear it between rounds)."""
    from longbert.strategies import windows as windows_module

    passes: list[list[int]] = []
    original = windows_module.plan_passes

    def recording(lengths, budget):
        plan = original(lengths, budget)
        passes.extend([[lengths[i] for i in p] for p in plan])
        return plan

    windows_module.plan_passes = recording
    try:
        yield passes
    finally:
        windows_module.plan_passes = original


def run_chunk(model, documents, batch_size: int, dtype: torch.dtype | None, repeats: int) -> dict:
    """Time the model over `documents`: autocast to `dtype` (None: as the model's weights are), fastest round."""
    times = []
    with recorded_passes() as passes:
        for repeat in range(repeats + 1):
            passes.clear()
            start = time.perf_counter()
            with torch.no_grad(), torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                for s in range(0, len(documents), batch_size):
                    model(documents[s : s + batch_size])
            if repeat:  # the first round is a warm-up
                times.append(time.perf_counter() - start)
    seconds = min(times)
    flops = forward_flops(model.backbone.config, passes, padded=True)
    useful = forward_flops(model.backbone.config, passes, padded=False)
    tokens = sum(d.shape[0] for d in documents)
    padded = sum(max(p) * len(p) for p in passes)
    real = sum(sum(p) for p in passes)
    return {"seconds": seconds, "documents_per_second": len(documents) / seconds, "tokens_per_second": tokens / seconds,
            "flop_per_second": flops / seconds, "useful_flop_per_second": useful / seconds,
            "padding_share": 1 - real / padded, "forward_passes": len(passes)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--documents", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-padding", type=float, help="backbone.max_padding_per_pass (default: the recipe's)")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="call longbert.utils.allocator.keep_freed_memory first, as every longbert command does")
    parser.add_argument("--emulate-avx2", action="store_true")
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    if args.emulate_avx2:
        rerun_with_avx2(__file__, args.output or RESULTS / "chunk-avx2-emulated.json")
    output = args.output or RESULTS / "chunk.json"
    if args.keep_freed_memory:
        from longbert.utils.allocator import keep_freed_memory

        keep_freed_memory()
    count, repeats = (16, 1) if args.quick else (args.documents, 3)
    bf16 = auto_precision() == "bf16"

    torch.manual_seed(0)
    overrides = ["strategy.name=chunk", "strategy.window=510"]
    if args.max_padding is not None:
        overrides.append(f"backbone.max_padding_per_pass={args.max_padding}")
    recipe = load_recipe(None, overrides)
    model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"]).eval()
    documents = long_reviews(model.tokenizer, count)

    config = model.backbone.config
    matmuls = {"fp32": peak_matmul(config, torch.float32, repeats + 2)}
    results = {"fp32": run_chunk(model, documents, args.batch_size, None, repeats)}
    if bf16:
        matmuls["bf16"] = peak_matmul(config, torch.bfloat16, repeats + 2)
        results["bf16"] = run_chunk(model, documents, args.batch_size, torch.bfloat16, repeats)
        results["bf16_weights"] = run_chunk(model.to(torch.bfloat16), documents, args.batch_size, None, repeats)
        model.float()
    peak = {name: m["peak"] for name, m in matmuls.items()}
    for name, row in results.items():
        # Useful work only: FLOPs of the real tokens, padding not counted.
        own = "fp32" if name == "fp32" else "bf16"
        row["precision"] = name
        row["share_of_peak_fp32_matmul"] = row["useful_flop_per_second"] / peak["fp32"]
        row["share_of_peak_same_dtype_matmul"] = row["useful_flop_per_second"] / peak[own]
        row["executed_share_of_peak_same_dtype_matmul"] = row["flop_per_second"] / peak[own]
    report = {
        "command": " ".join(["python", "benchmarks/bench_chunk.py", *sys.argv[1:]]),
        "machine": describe_machine(),
        "auto_precision": auto_precision(),
        "model": f"{recipe.backbone.name} (chunk, 510-token windows, untrained head: speed only)",
        "documents": len(documents),
        "document_tokens_mean": sum(d.shape[0] for d in documents) / len(documents),
        "batch_size": args.batch_size,
        "max_padding_per_pass": recipe.backbone.max_padding_per_pass,
        "keep_freed_memory": args.keep_freed_memory,
        "peak_matmul_flop_per_second": peak,
        "matmul_flop_per_second_by_shape": {name: m["by_shape"] for name, m in matmuls.items()},
        "chunk_inference": results,
        "target": "chunk inference (useful FLOPs: padding not counted) >= 65% of the bf16 peak, "
                  ">= 75% of the fp32 peak",
        "target_met_fp32": results["fp32"]["share_of_peak_same_dtype_matmul"] >= 0.75,
    }
    if bf16:
        report["target_met_bf16"] = max(results["bf16"]["share_of_peak_same_dtype_matmul"],
                                        results["bf16_weights"]["share_of_peak_same_dtype_matmul"]) >= 0.65
        report["bf16_faster"] = results["bf16"]["seconds"] < results["fp32"]["seconds"]
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    print(f"{report['machine']['cpu_capability']}; auto runs {report['auto_precision']}; peak matmul: "
          + ", ".join(f"{name} {rate / 1e9:.1f} GFLOP/s" for name, rate in peak.items()))
    print(f"{len(documents)} IMDb test reviews > 512 tokens, mean {report['document_tokens_mean']:.0f} tokens")
    for name, row in results.items():
        print(f"chunk {name}: {row['tokens_per_second']:.0f} tokens/s, {row['documents_per_second']:.2f} docs/s, "
              f"{row['useful_flop_per_second'] / 1e9:.1f} useful GFLOP/s = "
              f"{100 * row['share_of_peak_same_dtype_matmul']:.0f}% of its dtype's peak; "
              f"{row['flop_per_second'] / 1e9:.1f} GFLOP/s executed with padding {100 * row['padding_share']:.1f}%")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
