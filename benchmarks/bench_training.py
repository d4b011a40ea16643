"""Training throughput and memory with the real MiniLM backbone on real IMDb training reviews: what each speed lever
is worth, tokens/s against batch size, and where imdb_sliding's memory goes.

    python benchmarks/bench_training.py            # every configuration: benchmarks/results/training.json + .png
    python benchmarks/bench_training.py --quick    # two configurations, two steps each: checks that it runs

A training step here is the loop's own (longbert.training.finetune): at the precision `auto` runs on this CPU (bf16
autocast where it is fast, fp32 elsewhere; the JSON records which),
forward through the strategy, the loss, backward, gradient clipping, AdamW step over the recipe's parameter groups.
Every configuration runs in a fresh subprocess (its peak memory is its own) on the same pool of 50 batches of
seeded IMDb training reviews: with `grouped`, in the order `train.group_by_length` gives (longbert.data.documents.
length_grouped_order), else in a plain seeded shuffle. After `warmup` steps, `steps` steps are timed.
  read tokens/s      tokens the backbone reads, [CLS]/[SEP] included, padding not (truncate: at most 512 a document;
                     sliding: every window, overlaps counted twice)
  document tokens/s  the documents' own tokens per second, what the training log prints
  peak_memory_mb     the process's peak resident set size over the timed steps (weights, optimizer state and the
                     step's activations)

Configurations (the `levers` group adds one lever at a time, in this order):
  as shipped      MiniLM's own dropout (attention 0.1, hidden 0.1), plain shuffle, the per-tensor AdamW loop
  attention 0     attention dropout 0 (what every recipe already sets: sdpa stays on its fused path)
  fused AdamW     the optimizer step in one fused kernel (longbert.utils.hardware.adamw, what training now uses)
  grouped         batches of similar length (train.group_by_length)
  hidden 0        no dropout inside the backbone either (imdb_full_cpu's setting)
Probes of levers the loop does not use, measured on the `hidden 0` configuration:
  bf16 weights    every weight and gradient in bf16, no autocast (an fp32 master copy would add its own copies)
  compile         the backbone through torch.compile (dynamic shapes); the first step, which compiles, is reported
                  apart
Batch sizes 4 .. 32 with the `hidden 0` configuration; and sliding (imdb_sliding's strategy and dropout), 30 timed
steps each, the resident size recorded after every step: at batch 16, at batch 8 (the same documents, in two halves:
what train.gradient_accumulation 2 does), at batch 16 with backbone.gradient_checkpointing, at batch 16 with glibc's
mmap threshold fixed at 1 MB (`set_mmap_threshold`), and at batch 16 with the heap trimmed after every step
(longbert.utils.hardware.trim_heap, what the training loop now does on the CPU).
Run it alone on the machine: about 20 minutes on a 2-core CPU (`--groups` runs a part).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from isolated import auto_precision, error_text, run_each, table_printer, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "training.json"
POOL_BATCHES = 50  # the pool: 50 batches of the largest batch size, the group length_grouped_order sorts

LEVERS = [
    ("as shipped", dict(attention_dropout=None, hidden_dropout=None, fused=False, grouped=False)),
    ("attention 0", dict(attention_dropout=0.0, hidden_dropout=None, fused=False, grouped=False)),
    ("fused AdamW", dict(attention_dropout=0.0, hidden_dropout=None, fused=True, grouped=False)),
    ("grouped", dict(attention_dropout=0.0, hidden_dropout=None, fused=True, grouped=True)),
    ("hidden 0", dict(attention_dropout=0.0, hidden_dropout=0.0, fused=True, grouped=True)),
]
BEST = LEVERS[-1][1]
PROBES = [("bf16 weights", dict(BEST, bf16_weights=True)), ("compile", dict(BEST, compile=True))]
BATCH_SIZES = [4, 8, 16, 32]
SLIDING = [
    ("sliding, batch 16", dict(attention_dropout=0.0, hidden_dropout=None, fused=True, grouped=False,
                               strategy="sliding")),
    ("sliding, batch 8 (x2 accumulation)", dict(attention_dropout=0.0, hidden_dropout=None, fused=True, grouped=False,
                                                strategy="sliding", split=2)),
    ("sliding, batch 16, checkpointing", dict(attention_dropout=0.0, hidden_dropout=None, fused=True, grouped=False,
                                              strategy="sliding", checkpointing=True)),
    ("sliding, batch 16, mmap over 1 MB", dict(attention_dropout=0.0, hidden_dropout=None, fused=True, grouped=False,
                                               strategy="sliding", mmap_threshold=2**20)),
    ("sliding, batch 16, heap trimmed", dict(attention_dropout=0.0, hidden_dropout=None, fused=True, grouped=False,
                                             strategy="sliding", trim=True)),
]
GROUPS = ["levers", "probes", "batch size", "sliding memory"]
SLIDING_STEPS = 30  # the sliding configurations run longer: the resident size climbs step after step


def set_mmap_threshold(size: int) -> None:
    """glibc: serve every allocation of at least `size` bytes by its own mmap, handed back when freed, instead of
    from the heap (whose threshold otherwise rises to 32 MB as large blocks are freed, and whose freed space may stay
    resident). M_MMAP_THRESHOLD is mallopt's parameter -3."""
    import ctypes

    ctypes.CDLL("libc.so.6").mallopt(-3, size)


def pool_documents(tokenizer, count: int, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    """`count` seeded IMDb training reviews, tokenized as longbert.data.documents does (no special tokens), and their
    labels."""
    import gzip
    import random

    from longbert.data.sources import resolve_data_path

    folder = resolve_data_path("imdb")
    if folder is None or not (folder / "train.jsonl.gz").is_file():
        raise SystemExit("IMDb not found: expected ../shared/data/imdb/train.jsonl.gz (or set LONGBERT_DATA_DIR)")
    with gzip.open(folder / "train.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    chosen = random.Random(seed).sample(rows, count)
    ids = tokenizer([r["text"] for r in chosen], add_special_tokens=False)["input_ids"]
    return ids, [int(r["label"]) for r in chosen]


def run_one(spec: dict) -> dict:
    """Time `spec["steps"]` training steps after `spec["warmup"]`, in this process."""
    import torch

    from longbert.config import recipe_from_dict
    from longbert.data.documents import length_grouped_order
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.strategies.base import unit_spans
    from longbert.training.optim import param_groups as _param_groups
    from longbert.utils.hardware import _rss_bytes, measure, trim_heap

    if spec.get("mmap_threshold"):
        set_mmap_threshold(spec["mmap_threshold"])
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    batch, strategy = spec["batch_size"], spec.get("strategy", "truncate")
    recipe = recipe_from_dict({
        "name": "bench", "strategy": {"name": strategy},
        "backbone": {"name": "minilm", "attention_dropout": spec["attention_dropout"],
                     "hidden_dropout": spec["hidden_dropout"],
                     "gradient_checkpointing": spec.get("checkpointing", False)},
        "train": {"batch_size": batch}})
    model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"])
    model.train()
    ids, labels = pool_documents(model.tokenizer, POOL_BATCHES * spec["pool_batch_size"])
    needed = (spec["warmup"] + spec["steps"]) * batch
    order = (length_grouped_order([len(d) for d in ids], batch, seed=1) if spec["grouped"]
             else torch.randperm(len(ids), generator=torch.Generator().manual_seed(1)).tolist())[:needed]
    batches = [order[k : k + batch] for k in range(0, needed, batch)]
    if spec.get("bf16_weights"):
        model.to(torch.bfloat16)
    if spec.get("compile"):
        model.backbone = torch.compile(model.backbone, dynamic=True)
    optimizer = torch.optim.AdamW(_param_groups(model, recipe.train), lr=1e-5, fused=spec["fused"],
                                  foreach=False if not spec["fused"] else None)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16,
                              enabled=not spec.get("bf16_weights") and auto_precision() == "bf16")
    split = spec.get("split", 1)

    def step(members: list[int]) -> None:
        for part in range(split):  # split > 1: the batch in `split` halves, gradients summed (accumulation)
            chosen = members[part::split]
            documents = [torch.tensor(ids[i], dtype=torch.long) for i in chosen]
            with autocast:
                logits = model(documents=documents).logits
                loss = model.loss(logits, torch.tensor([labels[i] for i in chosen]), None) / split
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if spec.get("trim"):
            trim_heap()

    def read_tokens(members: list[int]) -> int:
        return sum(sum(b - a for a, b in unit) + 2 for i in members for unit in unit_spans(model.strategy, len(ids[i])))

    out = dict(spec)
    try:
        first = time.perf_counter()
        step(batches[0])
        out["first_step_seconds"] = round(time.perf_counter() - first, 2)
        for members in batches[1 : spec["warmup"]]:
            step(members)
        times, resident = [], []
        with measure("cpu") as memory:
            for members in batches[spec["warmup"]:]:
                start = time.perf_counter()
                step(members)
                times.append(time.perf_counter() - start)
                resident.append(round((_rss_bytes() or 0) / 2**20))
    except Exception as error:  # recorded, not raised: a failing configuration is a result
        out["error"] = error_text(error)
        return out
    timed = batches[spec["warmup"]:]
    seconds = sum(times)
    out.update(
        step_seconds_median=round(statistics.median(times), 3),
        read_tokens_per_second=round(sum(read_tokens(m) for m in timed) / seconds, 1),
        document_tokens_per_second=round(sum(len(ids[i]) for m in timed for i in m) / seconds, 1),
        peak_memory_mb=memory["peak_memory_mb"],
        memory_kind=memory["memory_kind"],
        resident_mb_after_each_step=resident,
    )
    return out


def configurations(quick: bool) -> list[tuple[str, str, dict]]:
    """(group, label, settings) for every configuration to run."""
    if quick:
        return [("levers", "as shipped", dict(LEVERS[0][1], batch_size=4)),
                ("levers", "hidden 0", dict(BEST, batch_size=4))]
    runs = [("levers", label, dict(settings, batch_size=16)) for label, settings in LEVERS]
    runs += [("probes", label, dict(settings, batch_size=16)) for label, settings in PROBES]
    runs += [("batch size", f"batch {b}", dict(BEST, batch_size=b)) for b in BATCH_SIZES if b != 16]
    runs += [("sliding memory", label, dict(settings, batch_size=16, steps=SLIDING_STEPS))
             for label, settings in SLIDING]
    return runs


def summarise(results: list[dict]) -> dict:
    ok = {r["label"]: r for r in results if "error" not in r}
    summary: dict = {}
    base = ok.get("as shipped")
    if base:
        summary["read_tokens_per_second_over_as_shipped"] = {
            label: round(r["read_tokens_per_second"] / base["read_tokens_per_second"], 2)
            for label, r in ok.items() if r.get("strategy", "truncate") == "truncate" and r["batch_size"] == 16}
    curve = [r for r in ok.values() if r["group"] == "batch size" or r["label"] == "hidden 0"]
    summary["batch_size"] = {str(r["batch_size"]): {"read_tokens_per_second": r["read_tokens_per_second"],
                                                    "peak_memory_mb": r["peak_memory_mb"]}
                             for r in sorted(curve, key=lambda r: r["batch_size"])}
    summary["sliding_peak_memory_mb"] = {label: ok[label]["peak_memory_mb"] for label, _ in SLIDING if label in ok}
    return summary


print_table = table_printer(
    [("group", "group", "<15"), ("configuration", "label", "<36"), ("batch", "batch_size", ">5"),
     ("s/step", "step_seconds_median", ">7.2f"), ("read tok/s", "read_tokens_per_second", ">10.0f"),
     ("doc tok/s", "document_tokens_per_second", ">9.0f"), ("peak MB", "peak_memory_mb", ">8.0f")], keys=3)


def plot(results: list[dict], path: Path) -> None:
    """Read tokens/s and peak memory against batch size (the `hidden 0` configuration)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in results if "error" not in r and (r["group"] == "batch size" or r["label"] == "hidden 0")),
                  key=lambda r: r["batch_size"])
    if not rows:
        return
    figure, (speed, memory) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = [r["batch_size"] for r in rows]
    speed.plot(sizes, [r["read_tokens_per_second"] for r in rows], marker="o")
    memory.plot(sizes, [r["peak_memory_mb"] for r in rows], marker="o")
    for axis, label in ((speed, "read tokens / s"), (memory, "peak process memory (MB)")):
        axis.set_xscale("log", base=2)
        axis.set_xticks(sizes, [str(s) for s in sizes])
        axis.set_xlabel("batch size (documents)")
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
    figure.suptitle("Training, truncate, MiniLM, bf16, IMDb reviews, 2-core CPU (benchmarks/bench_training.py)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two configurations at batch 4, two timed steps")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per configuration (batch 16; scaled so "
                                                                "that every batch size times about as many documents)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's default for this machine)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed to one configuration")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON; the plot goes beside it (.png)")
    parser.add_argument("--groups", nargs="+", choices=GROUPS, help="only these groups of configurations")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return

    from longbert.utils.hardware import describe_machine

    threads = args.threads or torch.get_num_threads()
    runs = [r for r in configurations(args.quick) if not args.groups or r[0] in args.groups]
    pool_batch_size = 4 if args.quick else max(BATCH_SIZES)  # the same pool whichever groups run
    specs = [dict(settings, group=group, label=label, warmup=1 if args.quick else args.warmup, threads=threads,
                  pool_batch_size=pool_batch_size,
                  steps=2 if args.quick else settings.get("steps") or max(2, args.steps * 16 // settings["batch_size"]))
             for group, label, settings in runs]
    results = run_each(__file__, specs, args.timeout, ["group", "label"],
                       lambda r: f"{r['read_tokens_per_second']:.0f} read tokens/s, peak {r['peak_memory_mb']} MB")
    report = {
        "benchmark": "training steps: speed levers, batch size, sliding memory (MiniLM, IMDb training reviews)",
        "command": " ".join(["python benchmarks/bench_training.py", *sys.argv[1:]]),
        "machine": describe_machine(),
        "settings": {"threads": threads, "precision": f"{auto_precision()} (what mixed_precision auto runs on this "
                     "CPU) unless bf16 weights",
                     "backbone": "minilm (all-MiniLM-L6-v2)", "strategy": "truncate head_tail 510 unless sliding",
                     "pool": f"{POOL_BATCHES} batches of {pool_batch_size} seeded IMDb training reviews",
                     "quick": args.quick},
        "results": results,
        "summary": summarise(results),
    }
    write_results(args.output, report, print_table)
    plot(results, args.output.with_suffix(".png"))
    print(f"wrote {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
