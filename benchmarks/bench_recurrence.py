"""Speed and peak memory of the `recurrence` and `rmt` strategies at inference, side by side with `chunk`, on the
same real documents (IMDb test reviews laid end to end) and the same MiniLM weights.

    python benchmarks/bench_recurrence.py            # 2,048 / 8,192 / 32,768 / 65,536 tokens, fp32 and bf16
    python benchmarks/bench_recurrence.py --quick    # 2,048 and 4,096 tokens, bf16, 1 timed forward:
                                                     # checks that it runs
    python benchmarks/bench_recurrence.py --streaming --output benchmarks/results/recurrence-1m.json
                                                     # 1,048,576 tokens through recurrence and rmt, bf16, one forward:
                                                     # the streaming peak (target: under 2 GB for the whole process)

What is measured: one document per forward, inference (eval mode, no_grad), bf16 autocast and fp32.
  recurrence   510-token segments, a memory of 512 tokens per layer spanning 1 segment, distance bias (defaults)
  rmt          500-token segments with 10 memory tokens (defaults)
  chunk        510-token chunks through plain MiniLM, as many per pass as the default budget allows (64 windows,
               16,384 tokens)
The document is the first reviews of IMDb's test split joined with spaces, tokenized without special tokens and
cut to the length (content tokens; [CLS]/[SEP] come on top). Every configuration runs in a fresh subprocess, so
each peak is its own: peak_memory_mb is the process's peak resident set size during its first forward
(longbert.utils.hardware.measure), model_memory_mb the resident size just before it (weights, runtime, the token ids),
forward_memory_mb the difference. Time is the median of the timed forwards after that first one.
Targets: forward memory flat in length for `recurrence`; its time per token within 1.5x of chunk's.

Writes benchmarks/results/recurrence.json (or --output) and prints a table. The full run takes roughly 15 to 30
minutes on a 2-core CPU (64k tokens in fp32 dominate); run it alone on the machine.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
from pathlib import Path

from isolated import error_text, measure_forwards, run_each, table_printer, write_results
from isolated import find as find_result

LENGTHS = [2048, 8192, 32768, 65536]
QUICK_LENGTHS = [2048, 4096]
STREAMING_LENGTH = 1_048_576
SYSTEMS = ["recurrence", "rmt", "chunk"]
PRECISIONS = ["bf16", "fp32"]
RESULTS = Path(__file__).resolve().parent / "results" / "recurrence.json"


# -- one configuration, in its own process ---------------------------------------------------------------------


def imdb_document(tokenizer, tokens: int) -> tuple[list[int], int]:
    """The first `tokens` content ids of IMDb test reviews laid end to end (repeated if they run out); returns
    (ids, reviews used)."""
    from longbert.data.sources import resolve_data_path

    folder = resolve_data_path("imdb")
    if folder is None or not (folder / "test.jsonl.gz").is_file():
        raise SystemExit("IMDb not found: expected ../shared/data/imdb/test.jsonl.gz (or set LONGBERT_DATA_DIR)")
    ids: list[int] = []
    reviews = 0
    while len(ids) < tokens:  # the test split holds about 7M tokens: repeating is only a safeguard
        with gzip.open(folder / "test.jsonl.gz", "rt") as f:
            for line in f:
                ids.extend(tokenizer(json.loads(line)["text"], add_special_tokens=False)["input_ids"])
                reviews += 1
                if len(ids) >= tokens:
                    break
    return ids[:tokens], reviews


def build_strategy(system: str, backbone, special, token_pooling: str = "cls"):
    from longbert.strategies.base import PassBudget
    from longbert.strategies.configs import ChunkConfig, RecurrenceConfig, RmtConfig
    from longbert.strategies.registry import build_strategy as build

    config = {"recurrence": RecurrenceConfig(token_pooling=token_pooling),
              "rmt": RmtConfig(token_pooling=token_pooling),
              "chunk": ChunkConfig(window=510, token_pooling=token_pooling)}[system]
    strategy = build(config, backbone.config.hidden_size, special, PassBudget())
    strategy.adapt_backbone(backbone)
    return strategy.eval()


def run_one(spec: dict) -> dict:
    """Build one system, run one document `repeats + 1` times; returns the measurements (or the error)."""
    import torch
    import transformers

    from longbert.modeling.backbone import load_backbone
    from longbert.strategies.base import SpecialTokens

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(spec["threads"])
    backbone, tokenizer = load_backbone("minilm", attention_dropout=0.0, hidden_dropout=0.0)
    backbone.eval()
    special = SpecialTokens.from_tokenizer(tokenizer)
    strategy = build_strategy(spec["system"], backbone, special, spec.get("token_pooling", "cls"))
    ids, reviews = imdb_document(tokenizer, spec["tokens"])
    document = torch.tensor(ids, dtype=torch.long)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=spec["precision"] == "bf16")
    out = dict(spec, reviews=reviews)

    def forward():
        units = strategy.encode(backbone, [document])
        strategy.pool(units)
        return units

    try:
        with torch.no_grad(), autocast:
            measured, units = measure_forwards(forward, spec["repeats"], spec["tokens"])
    except Exception as error:  # recorded, not raised: a failing configuration is a result
        out["error"] = error_text(error)
        return out
    out.update(measured, units=int(units.mask.sum()))
    return out


# -- the driver ------------------------------------------------------------------------------------------------


def summarise(results: list[dict]) -> dict:
    """Per precision: recurrence's and rmt's time per token over chunk's at each length, and how each system's
    forward memory grows from the shortest to the longest document."""
    find = functools.partial(find_result, results)

    lengths = sorted({r["tokens"] for r in results})
    summary = {}
    for precision in sorted({r["precision"] for r in results}):
        row: dict = {}
        for system in ("recurrence", "rmt"):
            row[f"{system}_time_per_token_over_chunk"] = {
                str(t): round(find(system, precision, t)["seconds"] / find("chunk", precision, t)["seconds"], 2)
                for t in lengths if find(system, precision, t) and find("chunk", precision, t)}
        for system in SYSTEMS:
            row[f"{system}_forward_memory_mb"] = {
                str(t): find(system, precision, t)["forward_memory_mb"] for t in lengths if find(system, precision, t)}
        ratios = row["recurrence_time_per_token_over_chunk"].values()
        row["recurrence_within_1.5x_of_chunk"] = bool(ratios) and max(ratios) <= 1.5
        summary[precision] = row
    return summary


print_table = table_printer(
    [("system", "system", "<11"), ("prec", "precision", "<5"), ("tokens", "tokens", ">6"),
     ("units", "units", ">5"), ("seconds", "seconds", ">8.3f"), ("us/token", "us_per_token", ">9.1f"),
     ("peak MB", "peak_memory_mb", ">8.0f"), ("fwd MB", "forward_memory_mb", ">7.0f")], keys=3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,048 and 4,096 tokens, bf16 only, 1 timed forward")
    parser.add_argument("--streaming", action="store_true",
                        help="1,048,576 tokens through recurrence and rmt, bf16, the first forward only")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, help="which systems (default: all)")
    parser.add_argument("--token-pooling", default="cls", choices=["cls", "mean"],
                        help="segment vectors (cls: the [CLS] state, as the earlier measurements; mean)")
    parser.add_argument("--lengths", type=int, nargs="+", help="document lengths in content tokens")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, help="bf16 and/or fp32")
    parser.add_argument("--repeats", type=int, help="timed forwards per configuration (after the first)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's default for this machine)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds allowed to one configuration")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    threads = args.threads or torch.get_num_threads()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return

    from longbert.utils.hardware import describe_machine

    lengths = args.lengths or ([STREAMING_LENGTH] if args.streaming else QUICK_LENGTHS if args.quick else LENGTHS)
    precisions = args.precisions or (["bf16"] if args.quick or args.streaming else PRECISIONS)
    repeats = args.repeats if args.repeats is not None else 0 if args.streaming else 1 if args.quick else 3
    systems = args.systems or (["recurrence", "rmt"] if args.streaming else SYSTEMS)
    specs = [dict(system=system, precision=precision, tokens=tokens, repeats=repeats, threads=threads,
                  token_pooling=args.token_pooling)
             for tokens in lengths for precision in precisions for system in systems]
    results = run_each(__file__, specs, args.timeout, ["system", "precision", "tokens"],
                       lambda r: f"{r['seconds']:.3f}s, peak {r['peak_memory_mb']} MB "
                                 f"(forward {r['forward_memory_mb']} MB)")
    report = {
        "benchmark": "recurrence / rmt / chunk inference, one real document per forward",
        "machine": describe_machine(),
        "settings": {"lengths": lengths, "precisions": precisions, "repeats": repeats, "threads": threads,
                     "backbone": "minilm (all-MiniLM-L6-v2)", "document": "IMDb test reviews end to end",
                     "recurrence": "segment 510, memory 512, memory_segments 1, distance bias (defaults)",
                     "rmt": "segment 500, 10 memory tokens", "token_pooling": args.token_pooling,
                     "chunk": "window 510, budget 64 windows / 16384 tokens per pass", "quick": args.quick},
        "results": results,
        "summary": summarise(results) if "chunk" in systems else {},
    }
    write_results(args.output, report, print_table)


if __name__ == "__main__":
    main()
