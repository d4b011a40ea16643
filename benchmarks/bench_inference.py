"""Inference throughput of one chunk model run five ways on the same IMDb test reviews longer than 512 tokens, with
the real MiniLM backbone: PyTorch fp32, PyTorch bf16 (autocast), PyTorch int8 (`--precision int8`: the backbone's
Linear layers dynamically quantized), and the exported ONNX graphs (`longbert export`) in onnxruntime, fp32 and int8
(dynamic quantization of the encoder). The machine record says which CPU (its capability: AVX2, AVX512) and what
`auto` runs there; the bf16 row runs only where `auto` picks bf16 (elsewhere bf16 is emulated, slowly, and says nothing
about what a user gets).

    python benchmarks/bench_inference.py                          # 64 reviews, 3 timed rounds:
                                                                  # benchmarks/results/inference.json
    python benchmarks/bench_inference.py --quick -o /tmp/x.json   # 8 reviews, 1 round: checks the script,
                                                                  # measures nothing
    python benchmarks/bench_inference.py --run runs/imdb_quick    # a trained chunk run instead of the untrained head

The model: by default a chunk model (510-token chunks, token-mean vectors as MiniLM was trained, mean pooling by
new tokens) on the packaged MiniLM, its head initialised from seed 0 and not trained: speed does not depend on the
head's weights. The export's parity numbers (label agreement, probability differences against PyTorch fp32 on these
reviews) are reported too; with an untrained head the probabilities sit near 0.5, so label agreement says little there —
`--run` a trained run for that. Timed: the model from token ids to probabilities (tokenizing is the same for
every backend and not counted), in batches of `--batch-size`, one warm-up round, then the fastest of `--repeats`
rounds. onnxruntime gets as many threads as torch.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

import torch
from isolated import auto_precision

from longbert.config import load_recipe
from longbert.data.documents import tokenize_documents
from longbert.data.sources import resolve_data_path
from longbert.inference.export import export_model
from longbert.inference.exported import ExportedClassifier
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.utils.hardware import describe_machine

OUT = Path(__file__).resolve().parent / "results" / "inference.json"


def long_reviews(tokenizer, count: int) -> list[str]:
    """The first `count` IMDb test reviews (every 7th) longer than 512 tokens, as bench_chunk.py picks them."""
    folder = resolve_data_path("imdb")
    with gzip.open(folder / "test.jsonl.gz", "rt") as f:
        texts = [json.loads(line)["text"] for line in f][::7][:4000]
    _, lengths = tokenize_documents(tokenizer, texts, 10**6)
    return [t for t, n in zip(texts, lengths) if n > 512][:count]


def time_rounds(forward, documents: list[torch.Tensor], batch_size: int, repeats: int) -> dict:
    """One warm-up round, then `repeats` timed rounds over every batch; the fastest round counts."""
    times = []
    for repeat in range(repeats + 1):
        start = time.perf_counter()
        for s in range(0, len(documents), batch_size):
            forward(documents[s : s + batch_size])
        if repeat:
            times.append(time.perf_counter() - start)
    seconds = min(times)
    tokens = sum(d.shape[0] for d in documents)
    return {"seconds": round(seconds, 4), "rounds": [round(t, 4) for t in times],
            "documents_per_second": round(len(documents) / seconds, 2), "tokens_per_second": round(tokens / seconds, 1)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="8 reviews, one timed round: a smoke test of the script")
    parser.add_argument("--documents", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--run", type=Path, default=None,
                        help="a trained chunk run (or saved model) to measure instead")
    parser.add_argument("-o", "--output", type=Path, default=OUT)
    args = parser.parse_args()
    count, repeats = (8, 1) if args.quick else (args.documents, args.repeats)

    if args.run is not None:
        model = LongDocumentClassifier.from_pretrained(args.run)
        what = f"the model in {args.run}"
    else:
        torch.manual_seed(0)
        recipe = load_recipe(None, ["strategy.name=chunk", "strategy.window=510", "strategy.pooling=mean",
                                    "strategy.token_pooling=mean"])
        model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"])
        what = ("chunk (510 tokens, token mean, mean pooling by new tokens) on the packaged MiniLM, "
                "head untrained (seed 0)")
    model.eval()
    texts = long_reviews(model.tokenizer, count)
    documents, _ = model.tokenize(texts)

    with tempfile.TemporaryDirectory() as scratch:
        model.save_pretrained(Path(scratch) / "model")
        start = time.perf_counter()
        exported = export_model(Path(scratch) / "model", Path(scratch) / "onnx", quantize="int8", parity_texts=texts)
        export_seconds = time.perf_counter() - start
        sizes = {p.name: round(p.stat().st_size / 1e6, 1) for p in exported.folder.glob("*.onnx")}
        runtimes = {p: ExportedClassifier(exported.folder, p, threads=torch.get_num_threads())
                    for p in ("fp32", "int8")}

        def pytorch(dtype):
            def forward(batch):
                with torch.no_grad(), torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                    return model.probabilities(model(batch).logits)
            return forward

        def onnx(runtime):
            return lambda batch: runtime.probabilities(runtime.logits(batch))

        quantized = model.for_precision("int8")

        def pytorch_int8(batch):
            with torch.no_grad():
                return quantized.probabilities(quantized(batch).logits)

        backends = {"pytorch_fp32": pytorch(None), "pytorch_bf16": pytorch(torch.bfloat16),
                    "pytorch_int8": pytorch_int8, "onnx_fp32": onnx(runtimes["fp32"]),
                    "onnx_int8": onnx(runtimes["int8"])}
        if auto_precision() != "bf16":
            del backends["pytorch_bf16"]
        results = {}
        for name, forward in backends.items():
            results[name] = time_rounds(forward, documents, args.batch_size, repeats)
            print(f"{name}: {results[name]['documents_per_second']:.2f} documents/s, "
                  f"{results[name]['tokens_per_second']:.0f} tokens/s", flush=True)
    exact = torch.cat([backends["pytorch_fp32"](documents[s : s + args.batch_size])
                       for s in range(0, len(documents), args.batch_size)])
    quick = torch.cat([pytorch_int8(documents[s : s + args.batch_size])
                       for s in range(0, len(documents), args.batch_size)])
    pytorch_int8_parity = {"label_agreement": round(float((exact.argmax(1) == quick.argmax(1)).float().mean()), 4),
                           "max_probability_difference": round(float((exact - quick).abs().max()), 5)}
    base = results["pytorch_fp32"]["seconds"]
    for row in results.values():
        row["speedup_over_pytorch_fp32"] = round(base / row["seconds"], 2)

    command = "python benchmarks/bench_inference.py" + (" --quick" if args.quick else "")
    if args.run is not None:
        command += f" --run {args.run}"
    report = {
        "command": command,
        "machine": describe_machine(),
        "auto_precision": auto_precision(),
        "model": what,
        "documents": len(documents),
        "document_tokens_mean": round(sum(d.shape[0] for d in documents) / len(documents), 1),
        "batch_size": args.batch_size,
        "repeats": repeats,
        "timed": "token ids -> probabilities (tokenizing not counted); the fastest round",
        "onnxruntime_threads": torch.get_num_threads(),
        "export_seconds": round(export_seconds, 1),
        "onnx_file_mb": sizes,
        "results": results,
        "parity_against_pytorch_fp32": exported.parity,
        "pytorch_int8_against_pytorch_fp32": pytorch_int8_parity,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{len(documents)} IMDb test reviews > 512 tokens, mean {report['document_tokens_mean']:.0f} tokens; "
          f"export took {export_seconds:.0f} s")
    for name, row in results.items():
        print(f"{name:>13}: {row['documents_per_second']:6.2f} documents/s "
              f"({row['speedup_over_pytorch_fp32']:.2f}x fp32)")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
