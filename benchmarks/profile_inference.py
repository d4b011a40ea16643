"""Where chunk inference spends its time, by operator (torch.profiler), for the real MiniLM on IMDb test reviews
longer than 512 tokens: the GEMMs against everything around them (attention, GELU, LayerNorm, copies).

    python benchmarks/profile_inference.py                    # fp32 here: benchmarks/results/profile-fp32.json
    python benchmarks/profile_inference.py --emulate-avx2     # AVX-512 masked as bench_belt.py masks it:
                                                              # benchmarks/results/profile-fp32-avx2-emulated.json

One warm-up call of `predict`, then one profiled call; operators are grouped by name and, for the largest, by input
shape (which tells a Linear layer's bias copy inside aten::addmm from a real copy).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    from isolated import rerun_with_avx2

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=16)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--emulate-avx2", action="store_true")
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    suffix = "-avx2-emulated" if args.emulate_avx2 else ""
    output = args.output or RESULTS / f"profile-{args.precision}{suffix}.json"
    if args.emulate_avx2:
        rerun_with_avx2(__file__, output)
    import json

    import torch
    from bench_belt import long_reviews
    from torch.profiler import ProfilerActivity, profile

    from longbert.config import load_recipe
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.utils.hardware import describe_machine

    torch.set_num_threads(2)
    recipe = load_recipe(None, ["backbone.name=minilm", "backbone.attention_dropout=0.0", "strategy.name=chunk",
                                "strategy.window=510", "strategy.pooling=mean", "strategy.token_pooling=mean"])
    model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"]).eval()
    texts = long_reviews(args.documents, model.tokenizer)
    model.predict(texts, 16, args.precision)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        model.predict(texts, 16, args.precision)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    by_name = sorted(({"op": e.key, "share": e.self_cpu_time_total / total, "calls": e.count,
                       "ms": e.self_cpu_time_total / 1e3} for e in events), key=lambda r: -r["ms"])[:12]
    by_shape = sorted(({"op": e.key, "ms": e.self_cpu_time_total / 1e3, "calls": e.count,
                        "shapes": e.input_shapes} for e in prof.key_averages(group_by_input_shape=True)
                       if e.key in ("aten::copy_", "aten::gelu", "aten::addmm")), key=lambda r: -r["ms"])[:10]
    result = {"command": " ".join(["python", "benchmarks/profile_inference.py", *sys.argv[1:]]),
              "machine": describe_machine(), "precision": args.precision, "documents": len(texts),
              "total_ms": total / 1e3, "by_operator": by_name, "largest_by_shape": by_shape}
    output.write_text(json.dumps(result, indent=2) + "\n")
    for row in by_name:
        print(f"{row['op']:<52} {100 * row['share']:5.1f}%  {row['ms']:8.1f} ms  {row['calls']} calls")
    print(f"capability {result['machine']['cpu_capability']}; written to {output}")


if __name__ == "__main__":
    main()
