"""What `train.reading` saves in the end-to-end stage: training steps with gradient through every unit (what training
did before it) against gradient through the top units only (grad_units, random_units), the lower layers frozen and
cached (frozen_layers), and both, at document lengths from 512 to 16,384 tokens.

    python benchmarks/bench_reading.py                         # every length and configuration (about 40 minutes)
    python benchmarks/bench_reading.py --lengths 2048 --quick  # one length, one batch a pass: checks that it runs

Each (configuration, length) runs in a fresh process (its peak memory is its own): MiniLM, chunk over 126-token
windows with vote pooling and the unit loss (compare's settings for the reach probes), at the precision mixed_precision
auto runs on this CPU, AdamW over the recipe's parameter groups. The documents are real text: Hyperpartisan articles
tokenized and laid end to end, cut into documents of exactly `length` tokens. A batch holds 16 documents up to 2,048
tokens and 32,768 tokens' worth above (8 at 4,096, 4 at 8,192, 2 at 16,384). The same `batches` batches are trained on
twice, as two epochs:
  first epoch   each document is met for the first time: the reader fills its caches (every unit read once without
                gradient; frozen_layers' lower-layer states), then trains
  later epoch   the documents again: the caches are there
Reported per document: seconds in each, the tokens read with and without gradient, and the peak resident memory over
both; and, from them, the end-to-end stage of 1,000 such documents over 2 and 3 epochs, and its speed-up over reading
every unit. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from isolated import auto_precision, error_text, run_each, table_printer, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "reading.json"
LENGTHS = [512, 1024, 2048, 4096, 8192, 16384]
BATCH_TOKENS = 32768
CONFIGURATIONS = {
    "every unit": {},
    "top 1 + 1 random": {"grad_units": 1, "random_units": 1},
    "3 layers frozen": {"frozen_layers": 3},
    "top 1 + 1 and 3 frozen": {"grad_units": 1, "random_units": 1, "frozen_layers": 3},
}


def batch_size(length: int) -> int:
    return 16 if length <= 2048 else max(1, BATCH_TOKENS // length)


def documents(tokenizer, length: int, count: int) -> list[list[int]]:
    """`count` documents of exactly `length` tokens cut from Hyperpartisan's articles laid end to end."""
    import gzip

    from longbert.data.sources import resolve_data_path

    folder = resolve_data_path("hyperpartisan")
    if folder is None:
        raise SystemExit("Hyperpartisan not found: expected ../shared/data/hyperpartisan (or set LONGBERT_DATA_DIR)")
    ids: list[int] = []
    with gzip.open(sorted(folder.glob("*.jsonl.gz"))[0], "rt") as f:
        for line in f:
            ids += tokenizer(json.loads(line)["text"], add_special_tokens=False)["input_ids"]
            if len(ids) >= length * count:
                break
    if len(ids) < length * count:
        raise SystemExit(f"Hyperpartisan holds fewer than {length * count} tokens")
    return [ids[k * length : (k + 1) * length] for k in range(count)]


def run_one(spec: dict) -> dict:
    """Two epochs over the same batches for one configuration and length, in this process."""
    import torch

    from longbert.config import recipe_from_dict
    from longbert.config.train_reading import ReadingConfig
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.training.optim import param_groups
    from longbert.training.selective import UnitReader
    from longbert.utils.hardware import adamw, measure

    torch.manual_seed(0)
    recipe = recipe_from_dict({"name": "bench", "backbone": {"name": "minilm"},
                               "strategy": {"name": "chunk", "window": 126, "pooling": "vote"}})
    model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"]).train()
    bf16 = auto_precision() == "bf16"
    size = batch_size(spec["length"])
    ids = documents(model.tokenizer, spec["length"], size * spec["batches"])
    reader = UnitReader(model, ReadingConfig(**spec["reading"]), [len(d) for d in ids],
                        torch.bfloat16 if bf16 else torch.float32)
    optimizer = adamw(param_groups(model, recipe.train))
    labels = torch.arange(len(ids)) % 2
    unit_loss = recipe.train.unit_loss_weight

    def step(start: int) -> None:
        batch = [torch.tensor(d) for d in ids[start : start + size]]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            output = model(documents=batch, reader=reader)
            target = labels[start : start + size]
            loss = model.loss(output.logits, target) + unit_loss * model.unit_loss(output.units, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()

    out = dict(spec, batch_size=size, precision="bf16" if bf16 else "fp32")
    try:
        with measure("cpu") as memory:
            for epoch in ("first", "later"):
                before = dict(reader.counts)
                started = time.perf_counter()
                for start in range(0, len(ids), size):
                    step(start)
                seconds = time.perf_counter() - started
                out[f"{epoch}_epoch_seconds_per_document"] = round(seconds / len(ids), 4)
                out[f"{epoch}_epoch_tokens"] = {k: reader.counts[k] - before[k] for k in reader.counts}
    except Exception as error:  # recorded, not raised: a configuration that fails is a result
        out["error"] = error_text(error)
        return out
    out.update(peak_memory_mb=memory["peak_memory_mb"], memory_kind=memory["memory_kind"],
               lower_state_cache_mb=round(sum(s.numel() * s.element_size() for states in reader.states.values()
                                              for s in states) / 2**20, 1))
    for epochs in (2, 3):
        out[f"stage_minutes_1000_documents_{epochs}_epochs"] = round(
            1000 * (out["first_epoch_seconds_per_document"]
                    + (epochs - 1) * out["later_epoch_seconds_per_document"]) / 60, 1)
    return out


def summarise(results: list[dict]) -> dict:
    """Each configuration's speed-up over `every unit` at each length, and its peak memory as a share of it."""
    ok = {(r["label"], r["length"]): r for r in results if "error" not in r}
    summary: dict = {}
    for (label, length), r in ok.items():
        base = ok.get(("every unit", length))
        if label == "every unit" or base is None:
            continue
        summary.setdefault(label, {})[str(length)] = {
            f"speed_up_{e}_epochs": round(base[f"stage_minutes_1000_documents_{e}_epochs"]
                                          / r[f"stage_minutes_1000_documents_{e}_epochs"], 2) for e in (2, 3)
        } | {"peak_memory_share": round(r["peak_memory_mb"] / base["peak_memory_mb"], 2)}
    return summary


print_table = table_printer(
    [("configuration", "label", "<22"), ("length", "length", ">6"), ("batch", "batch_size", ">5"),
     ("s/doc first", "first_epoch_seconds_per_document", ">11.3f"),
     ("s/doc later", "later_epoch_seconds_per_document", ">11.3f"),
     ("1000 docs, 3 ep (min)", "stage_minutes_1000_documents_3_epochs", ">21.1f"),
     ("peak MB", "peak_memory_mb", ">8.0f")], keys=2)


def plot(results: list[dict], path: Path) -> None:
    """Minutes of the end-to-end stage (1,000 documents, 3 epochs) and peak memory against document length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (speed, memory) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label in CONFIGURATIONS:
        rows = sorted((r for r in results if r["label"] == label and "error" not in r), key=lambda r: r["length"])
        if not rows:
            continue
        lengths = [r["length"] for r in rows]
        speed.plot(lengths, [r["stage_minutes_1000_documents_3_epochs"] for r in rows], marker="o", label=label)
        memory.plot(lengths, [r["peak_memory_mb"] / 1024 for r in rows], marker="o", label=label)
    from matplotlib.ticker import ScalarFormatter

    lengths = sorted({r["length"] for r in results})
    for axis, title in ((speed, "end-to-end stage, 1,000 documents, 3 epochs (minutes)"),
                        (memory, "peak resident memory (GB); batches of 32,768 tokens past 2,048")):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xticks(lengths, [f"{n:,}" for n in lengths])
        axis.yaxis.set_major_formatter(ScalarFormatter())
        axis.set_xlabel("document length (tokens)")
        axis.set_title(title, fontsize=10)
        axis.grid(True, alpha=0.3)
    memory.yaxis.set_minor_formatter(ScalarFormatter())  # within a decade of GB: its minor ticks labelled too
    speed.legend(fontsize=8)
    figure.suptitle("train.reading: chunk (126-token windows, vote), MiniLM, 2-core CPU (benchmarks/bench_reading.py)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="document lengths in tokens")
    parser.add_argument("--configurations", default=",".join(CONFIGURATIONS), help="which, by label")
    parser.add_argument("--batches", type=int, default=3, help="batches in each of the two epochs")
    parser.add_argument("--quick", action="store_true", help="one batch an epoch")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed to one configuration")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON; the plot goes beside it (.png)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return

    from longbert.utils.hardware import describe_machine

    labels = [c.strip() for c in args.configurations.split(",")]
    unknown = [c for c in labels if c not in CONFIGURATIONS]
    if unknown:
        raise SystemExit(f"--configurations: unknown {', '.join(unknown)}; known: {', '.join(CONFIGURATIONS)}")
    specs = [{"label": label, "reading": CONFIGURATIONS[label], "length": int(length),
              "batches": 1 if args.quick else args.batches}
             for length in args.lengths.split(",") for label in labels]
    results = run_each(__file__, specs, args.timeout, ["label", "length"],
                       lambda r: f"{r['first_epoch_seconds_per_document']:.3f} / "
                                 f"{r['later_epoch_seconds_per_document']:.3f} s a document, "
                                 f"peak {r['peak_memory_mb']} MB")
    report = {
        "benchmark": "train.reading: the end-to-end stage's training steps by document length (MiniLM, chunk 126, "
                     "vote, Hyperpartisan text)",
        "command": " ".join(["python benchmarks/bench_reading.py", *sys.argv[1:]]),
        "machine": describe_machine(),
        "settings": {"precision": auto_precision(), "batch": "16 documents up to 2,048 tokens, 32,768 tokens above",
                     "epochs": "two over the same batches: the first fills the caches"},
        "results": results,
        "summary": summarise(results),
    }
    write_results(args.output, report, print_table)
    plot(results, args.output.with_suffix(".png"))
    print(f"wrote {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
