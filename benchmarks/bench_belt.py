"""longbert's chunk inference against belt-nlp, the plain reference implementation of BERT over chunks, side by side in
one process: the same MiniLM weights, the same IMDb test reviews longer than 512 tokens, 510-token chunks without
overlap pooled by their mean, texts in and probabilities out (tokenizing counted for both), documents per second.

    pip install --no-deps belt-nlp==1.1.0                 # not a longbert dependency; its torch/transformers are ours
    python benchmarks/bench_belt.py                       # this CPU as it is: benchmarks/results/belt.json
    python benchmarks/bench_belt.py --emulate-avx2        # the same, in a child process whose ATen, oneDNN, MKL
                                                          # and FBGEMM kernels are limited to AVX2 (isolated.AVX2_ENV):
                                                          # benchmarks/results/belt-avx2-emulated.json

Rows: belt-nlp fp32; longbert at fp32, int8 (`--precision int8`; with the untrained head no recheck gap was ever
measured, so nothing is read again in fp32) and, where `auto` picks bf16 here, bf16; then the same model exported
(`longbert export --quantize int8`) and run by onnxruntime, fp32 and int8, except under --emulate-avx2 (onnxruntime's
kernels cannot be masked). Each is warmed up once, then
timed `--repeats` times; the fastest round counts. The emulation is not an AVX2-only CPU: it keeps this CPU's clock,
caches and memory, and masks only the instruction sets the four libraries choose kernels by (torch's own capability
check then says AVX2); a real AVX2 machine can differ.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

from isolated import AVX2_ENV, auto_precision, rerun_with_avx2

RESULTS = Path(__file__).resolve().parent / "results"


def long_reviews(count: int, tokenizer) -> list[str]:
    """The first `count` IMDb test reviews longer than 512 tokens, in file order."""
    from longbert.data.sources import resolve_data_path

    texts = []
    with gzip.open(Path(resolve_data_path("imdb")) / "test.jsonl.gz", "rt") as f:
        for line in f:
            text = json.loads(line)["text"]
            if len(tokenizer(text)["input_ids"]) > 512:
                texts.append(text)
                if len(texts) == count:
                    break
    return texts


def fastest(run, repeats: int) -> tuple[float, object]:
    """(the fastest of `repeats` timed calls after one warm-up, the last call's result)."""
    result = run()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
    return best, result


def agreement(labels: list[str], reference: list[str]) -> float:
    """The share of `labels` equal to `reference`'s, position by position."""
    return sum(a == b for a, b in zip(labels, reference)) / len(labels)


def onnx_rows(ours, texts: list[str], args, reference: list[str]) -> dict:
    """The same model exported (`longbert export`, fp32 and int8 encoders) and run by onnxruntime over `texts`."""
    import tempfile

    import torch

    from longbert.inference.export import export_model
    from longbert.inference.exported import ExportedClassifier

    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        ours.save_pretrained(Path(scratch) / "model")
        exported = export_model(Path(scratch) / "model", Path(scratch) / "onnx", quantize="int8",
                                parity_texts=texts[:2])
        for precision in ("fp32", "int8"):
            runtime = ExportedClassifier(exported.folder, precision, threads=torch.get_num_threads())
            seconds, out = fastest(lambda r=runtime: r.predict(texts, args.batch_size), args.repeats)
            labels = [row["label"] for row in out]
            rows[f"longbert onnxruntime {precision}"] = {"seconds": seconds,
                                                          "label_agreement_with_fp32": agreement(labels, reference)}
    return rows


def measure(args) -> dict:
    import torch
    from belt_nlp.bert import BertNN
    from belt_nlp.bert_classifier_with_pooling import BertClassifierWithPooling
    from transformers import AutoModel

    from longbert.config import load_recipe
    from longbert.modeling.backbone import MINILM, resolve_backbone
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.utils.hardware import describe_machine

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    recipe = load_recipe(None, ["backbone.name=minilm", "backbone.attention_dropout=0.0", "strategy.name=chunk",
                                "strategy.window=510", "strategy.pooling=mean", "strategy.token_pooling=mean"])
    ours = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"]).eval()
    texts = long_reviews(args.documents, ours.tokenizer)
    folder = resolve_backbone(MINILM)
    # belt-nlp's network is [CLS] -> Linear(768, labels): its head is resized to MiniLM's 384 (its encoder as loaded).
    network = BertNN(AutoModel.from_pretrained(folder), num_labels=2)
    network.linear = torch.nn.Linear(network.model.config.hidden_size, 2)
    belt = BertClassifierWithPooling(num_labels=2, batch_size=args.batch_size, learning_rate=5e-5, epochs=1,
                                     chunk_size=510, stride=510, minimal_chunk_length=1, pooling_strategy="mean",
                                     neural_network=network, pretrained_model_name_or_path=str(folder), device="cpu")
    belt.neural_network.eval()
    rows = {}
    with torch.no_grad():
        seconds, reference = fastest(lambda: belt.predict_scores(texts, args.batch_size), args.repeats)
    rows["belt-nlp fp32"] = {"seconds": seconds}
    precisions = ["fp32", "int8"] + (["bf16"] if auto_precision() == "bf16" else [])
    agreement_base = None
    for precision in precisions:
        seconds, out = fastest(lambda p=precision: ours.predict(texts, args.batch_size, p), args.repeats)
        labels = [row["label"] for row in out]
        agreement_base = agreement_base or labels
        rows[f"longbert {precision}"] = {"seconds": seconds,
                                         "label_agreement_with_fp32": agreement(labels, agreement_base)}
    if os.environ.get("ATEN_CPU_CAPABILITY") != "avx2":  # onnxruntime's kernels cannot be masked to AVX2
        rows.update(onnx_rows(ours, texts, args, agreement_base))
    base = rows["belt-nlp fp32"]["seconds"]
    for row in rows.values():
        row["documents_per_second"] = len(texts) / row["seconds"]
        row["times_belt"] = base / row["seconds"]
    del reference
    return {"command": " ".join(["python", "benchmarks/bench_belt.py", *sys.argv[1:]]),
            "machine": describe_machine(), "emulated_avx2": {k: os.environ.get(k) for k in AVX2_ENV},
            "settings": {"documents": len(texts), "batch_size": args.batch_size,
                         "repeats": args.repeats, "threads": args.threads, "chunk_size": 510, "stride": 510,
                         "pooling": "mean", "belt_nlp": "1.1.0", "head": "untrained (seed 0): speed only",
                         "keep_freed_memory": args.keep_freed_memory},
            "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="call longbert.utils.allocator.keep_freed_memory first, as every longbert command does "
                             "(process-wide: belt-nlp gets it too)")
    parser.add_argument("--emulate-avx2", action="store_true")
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    if args.emulate_avx2:
        rerun_with_avx2(__file__, args.output or RESULTS / "belt-avx2-emulated.json")
    output = args.output or RESULTS / "belt.json"
    if args.keep_freed_memory:
        from longbert.utils.allocator import keep_freed_memory

        keep_freed_memory()
    result = measure(args)
    output.write_text(json.dumps(result, indent=2) + "\n")
    for name, row in result["rows"].items():
        extra = (f", labels agree with fp32 on {100 * row['label_agreement_with_fp32']:.1f}%"
                 if "label_agreement_with_fp32" in row else "")
        print(f"{name:<16} {row['documents_per_second']:6.2f} documents/s  {row['times_belt']:.2f}× belt-nlp{extra}")
    print(f"capability {result['machine']['cpu_capability']}; written to {output}")


if __name__ == "__main__":
    main()
