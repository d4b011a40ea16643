"""int8 against fp32 for one trained model on IMDb test reviews: how often the predicted labels agree, the accuracy of
each, and the documents/s of each, measured side by side in one process.

    python benchmarks/bench_int8_agreement.py MODEL [--documents 2000] [--every 12] [-o FILE]
        # MODEL: a run folder or a saved model folder; writes benchmarks/results/int8-agreement.json by default

The reviews are IMDb's test split, every --every-th one from the start (both labels, every length), read from
../shared/data/imdb (or LONGBERT_DATA_DIR). Every pass uses `model.predict` (batch 16, length-sorted batches): fp32,
then int8 with nothing read again ("int8_plain"), then int8 as `--precision int8` runs it, its close calls read again
in fp32 at the recheck gap `longbert quantize` chose on the run's validation split ("int8"; the same as int8_plain for a
model never measured). The machine record names the CPU and its capability (AVX2, AVX512), since int8's gain over fp32
depends on it. --emulate-avx2 masks AVX-512 as bench_belt.py does.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "int8-agreement.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--every", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--emulate-avx2", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=OUT)
    args = parser.parse_args()
    if args.emulate_avx2:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from isolated import rerun_with_avx2

        rerun_with_avx2(__file__, args.output)

    from longbert.data.sources import resolve_data_path
    from longbert.errors import LongbertError
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.modeling.int8 import int8_recheck_gap
    from longbert.utils.hardware import describe_machine

    try:
        model = LongDocumentClassifier.from_pretrained(args.model)
        with gzip.open(resolve_data_path("imdb") / "test.jsonl.gz", "rt") as f:
            rows = [json.loads(line) for line in f][:: args.every][: args.documents]
    except (LongbertError, OSError) as error:
        sys.exit(f"error: {error}")
    texts, labels = [r["text"] for r in rows], [model.label_names[r["label"]] for r in rows]
    results, predicted = {}, {}
    gap = int8_recheck_gap(model)
    for name, precision, recheck_gap in (("fp32", "fp32", None), ("int8_plain", "int8", 0.0), ("int8", "int8", gap)):
        model.for_precision(precision, recheck_gap)  # the int8 copy is made before the clock starts
        started = time.perf_counter()
        out = model.predict(texts, args.batch_size, precision)
        seconds = time.perf_counter() - started
        predicted[name] = [row["label"] for row in out]
        right = sum(p == t for p, t in zip(predicted[name], labels))
        results[name] = {"seconds": round(seconds, 2), "documents_per_second": round(len(texts) / seconds, 2),
                         "accuracy": round(right / len(texts), 4),
                         "label_agreement": round(sum(a == b for a, b in zip(predicted["fp32"], predicted[name]))
                                                  / len(texts), 4)}
        print(f"{name}: {results[name]}", flush=True)
    agreement = results["int8"]["label_agreement"]
    report = {
        "command": "python benchmarks/bench_int8_agreement.py " + " ".join(sys.argv[1:]),
        "machine": describe_machine(),
        "model": str(args.model),
        "documents": len(texts),
        "recheck_gap": gap,
        "label_agreement": round(agreement, 4),
        "label_agreement_plain": results["int8_plain"]["label_agreement"],
        "speedup_int8_plain_over_fp32": round(results["fp32"]["seconds"] / results["int8_plain"]["seconds"], 2),
        "speedup_int8_over_fp32": round(results["fp32"]["seconds"] / results["int8"]["seconds"], 2),
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{len(texts)} reviews: labels agree on {100 * agreement:.2f}% (recheck gap {gap:g}; "
          f"{100 * report['label_agreement_plain']:.2f}% with nothing read again); int8 "
          f"{report['speedup_int8_over_fp32']:.2f}x fp32 ({report['speedup_int8_plain_over_fp32']:.2f}x with nothing "
          f"read again); wrote {args.output}")


if __name__ == "__main__":
    main()
