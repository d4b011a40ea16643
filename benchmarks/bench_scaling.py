"""How inference time and memory grow with the document's length, for every strategy, on one real document (IMDb
test reviews laid end to end, as bench_recurrence.py builds it) and the real MiniLM weights, in bf16.

    python benchmarks/bench_scaling.py            # 512 .. 1,048,576 tokens, every strategy: results/scaling.json + .png
    python benchmarks/bench_scaling.py --quick    # 512 and 2,048 tokens, one forward each: checks that it runs
    python benchmarks/bench_scaling.py --strategies chunk rmt --lengths 512 8192

Every strategy runs with its defaults (`longbert strategies`), its unit vectors from the token mean (what MiniLM
was trained for). One document per forward, eval mode, no_grad, at the precision `auto` runs on this CPU (bf16 autocast
where it is fast, fp32 elsewhere; the JSON records which, with the CPU's capability). Every (strategy, length) runs in a
fresh subprocess, so each peak is its own: peak_memory_mb is the process's peak resident set size during the first
forward, forward_memory_mb that less what the process held just before it (weights, runtime, the token ids).
Time: the median of `repeats` forwards after the first for documents up to 32,768 tokens, the first forward alone
beyond. `read_tokens` is what the strategy reads of the document: truncate keeps 510 tokens and bigbird its
max_tokens (4,096 with [CLS]/[SEP]) whatever the length; their time per document flattens, and their time per
*document* token falls, because they read less of it.

The full run takes about 25 minutes on a 2-core CPU, most of it at 1M tokens; run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from isolated import auto_precision, error_text, measure_forwards, run_each, table_printer, write_results

STRATEGIES = ["truncate", "chunk", "sliding", "bigbird", "recurrence", "rmt"]
LENGTHS = [512, 2048, 8192, 32768, 131072, 1_048_576]
QUICK_LENGTHS = [512, 2048]
TIMED_UP_TO = 32768  # longer documents are timed by their first forward alone
RESULTS = Path(__file__).resolve().parent / "results" / "scaling.json"


def read_tokens(strategy: str, config, tokens: int) -> int:
    """Content tokens of a `tokens`-long document that the strategy reads (overlapping windows count once)."""
    if strategy == "truncate":
        return min(tokens, config.max_tokens)
    if strategy == "bigbird":
        return min(tokens, config.max_tokens - 2)
    return tokens


def run_one(spec: dict) -> dict:
    """One strategy on one document, in this process; returns the measurements (or the error)."""
    import torch
    import transformers
    from bench_recurrence import imdb_document

    from longbert.modeling.backbone import load_backbone
    from longbert.strategies.base import PassBudget, SpecialTokens
    from longbert.strategies.registry import build_strategy, get_entry

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(spec["threads"])
    backbone, tokenizer = load_backbone("minilm", attention_dropout=0.0, hidden_dropout=0.0)
    backbone.eval()
    config = get_entry(spec["strategy"]).config_cls(token_pooling="mean")
    strategy = build_strategy(config, backbone.config.hidden_size, SpecialTokens.from_tokenizer(tokenizer),
                              PassBudget())
    strategy.adapt_backbone(backbone)
    strategy.eval()
    ids, reviews = imdb_document(tokenizer, spec["tokens"])
    document = torch.tensor(ids, dtype=torch.long)
    out = dict(spec, reviews=reviews, read_tokens=read_tokens(spec["strategy"], config, spec["tokens"]))

    def forward():
        units = strategy.encode(backbone, [document])
        strategy.pool(units)
        return units

    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=auto_precision() == "bf16"):
            measured, units = measure_forwards(forward, spec["repeats"], spec["tokens"])
    except Exception as error:  # recorded, not raised: a failing configuration is a result
        out["error"] = error_text(error)
        return out
    out.update(measured, units=int(units.mask.sum()))
    out["us_per_read_token"] = round(out["seconds"] / out["read_tokens"] * 1e6, 1)
    return out


def summarise(results: list[dict]) -> dict:
    """Per strategy: time per read token and forward memory at each length, and how they grow from the shortest
    length to the longest (a ratio near 1: flat)."""
    summary = {}
    for strategy in sorted({r["strategy"] for r in results}):
        rows = sorted((r for r in results if r["strategy"] == strategy and "error" not in r),
                      key=lambda r: r["tokens"])
        if not rows:
            continue
        first, last = rows[0], rows[-1]
        summary[strategy] = {
            "us_per_read_token": {str(r["tokens"]): r["us_per_read_token"] for r in rows},
            "forward_memory_mb": {str(r["tokens"]): r["forward_memory_mb"] for r in rows},
            "peak_memory_mb": {str(r["tokens"]): r["peak_memory_mb"] for r in rows},
            "time_per_read_token_growth": round(last["us_per_read_token"] / first["us_per_read_token"], 2),
            "longest": last["tokens"],
        }
    return summary


print_table = table_printer(
    [("strategy", "strategy", "<11"), ("tokens", "tokens", ">8"), ("read", "read_tokens", ">8"),
     ("seconds", "seconds", ">9.3f"), ("us/read tok", "us_per_read_token", ">11.1f"),
     ("peak MB", "peak_memory_mb", ">8.0f"), ("fwd MB", "forward_memory_mb", ">7.0f")], keys=2)


def plot(results: list[dict], path: Path) -> None:
    """Two panels against document length (log scale): seconds per document, and peak process memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    for strategy in STRATEGIES:
        rows = sorted((r for r in results if r["strategy"] == strategy and "error" not in r), key=lambda r: r["tokens"])
        if not rows:
            continue
        lengths = [r["tokens"] for r in rows]
        time_axis.plot(lengths, [r["seconds"] for r in rows], marker="o", label=strategy)
        memory_axis.plot(lengths, [r["peak_memory_mb"] for r in rows], marker="o", label=strategy)
    for axis, label in ((time_axis, "seconds per document"), (memory_axis, "peak process memory (MB)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("document length (tokens)")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
    time_axis.set_yscale("log")
    time_axis.legend()
    figure.suptitle("Inference on one IMDb-text document, MiniLM, bf16, 2-core CPU (benchmarks/bench_scaling.py)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="512 and 2,048 tokens, one forward each")
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, help="which strategies (default: all)")
    parser.add_argument("--lengths", type=int, nargs="+", help="document lengths in content tokens")
    parser.add_argument("--repeats", type=int, default=2,
                        help=f"timed forwards after the first, up to {TIMED_UP_TO} tokens")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's default for this machine)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds allowed to one configuration")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON; the plot goes beside it (.png)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return

    from longbert.utils.hardware import describe_machine

    threads = args.threads or torch.get_num_threads()
    lengths = args.lengths or (QUICK_LENGTHS if args.quick else LENGTHS)
    strategies = args.strategies or STRATEGIES
    specs = [dict(strategy=strategy, tokens=tokens, threads=threads,
                  repeats=0 if args.quick or tokens > TIMED_UP_TO else args.repeats)
             for tokens in lengths for strategy in strategies]
    results = run_each(__file__, specs, args.timeout, ["strategy", "tokens"],
                       lambda r: f"{r['seconds']:.3f}s, peak {r['peak_memory_mb']} MB")
    report = {
        "benchmark": "inference time and memory against document length, every strategy with its defaults",
        "command": " ".join(["python benchmarks/bench_scaling.py", *sys.argv[1:]]),
        "machine": describe_machine(),
        "settings": {"lengths": lengths, "strategies": strategies, "threads": threads,
                     "precision": f"{auto_precision()} (what mixed_precision auto runs on this CPU)",
                     "backbone": "minilm (all-MiniLM-L6-v2)", "document": "IMDb test reviews end to end",
                     "token_pooling": "mean", "repeats_up_to_32768": args.repeats, "quick": args.quick},
        "results": results,
        "summary": summarise(results),
    }
    write_results(args.output, report, print_table)
    plot(results, args.output.with_suffix(".png"))
    print(f"wrote {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
