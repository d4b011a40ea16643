"""Chunk inference in three runtimes side by side in one process: belt-nlp (the plain reference implementation of BERT
over chunks), longbert in torch eager, and longbert with `--runtime openvino`. The same MiniLM weights, 510-token
chunks without overlap pooled by their mean.

    pip install --no-deps belt-nlp==1.1.0      # not a longbert dependency; its torch/transformers are ours
    pip install -e ".[openvino]"
    python benchmarks/bench_runtime.py         # benchmarks/results/runtime.json

Per row:
- documents/s on the first `--documents` IMDb test reviews longer than 512 tokens, texts in and probabilities out
  (tokenizing counted), the fastest of `--repeats` rounds after a warm-up; and that against belt-nlp fp32;
- the share of the dtype's matmul peak: useful encoder FLOPs (each window at its own length) per second of the
  encoder passes alone, over pre-tokenized documents, against `torch.matmul` at the encoder's own GEMM shapes measured
  in the same run (bench_chunk.py's measure); and the padding share of the executed tokens;
- against torch fp32 on the first `--agreement-documents` IMDb test reviews (any length): label agreement and the
  largest probability difference. `--model FOLDER` reads a trained model (its calibration included); without it the
  head is untrained (seed 0), whose probabilities sit near 0.5, so its label agreement is a harsh test.
- the first call's seconds (OpenVINO: converting and compiling the encoder), measured once.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from bench_belt import agreement, fastest, long_reviews
from bench_chunk import forward_flops, peak_matmul, recorded_passes
from bench_serve import reviews as first_reviews

RESULTS = Path(__file__).resolve().parent / "results"


def encoder_rate(read, documents, batch_size: int, config, repeats: int) -> dict:
    """`read(batch)` over pre-tokenized `documents`, the passes it lays out recorded: the useful FLOP/s of the fastest
    round (each window at its own length), and the padding share of the executed tokens."""

    def run():
        passes.clear()
        for s in range(0, len(documents), batch_size):
            read(documents[s : s + batch_size])

    with recorded_passes() as passes:
        seconds, _ = fastest(run, repeats)
    padded = sum(max(p) * len(p) for p in passes)
    return {"encoder_seconds": seconds,
            "useful_flop_per_second": forward_flops(config, passes, padded=False) / seconds,
            "padding_share_of_executed_tokens": 1 - sum(sum(p) for p in passes) / padded}


def probabilities_of(rows: list[dict]) -> torch.Tensor:
    return torch.tensor([list(r["probabilities"].values()) for r in rows])


def measure(args) -> dict:
    from belt_nlp.bert import BertNN
    from belt_nlp.bert_classifier_with_pooling import BertClassifierWithPooling
    from transformers import AutoModel

    from longbert.config import load_recipe
    from longbert.inference.openvino_runtime import OpenVINOModel
    from longbert.modeling.backbone import MINILM, resolve_backbone
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.utils.hardware import describe_machine, fast_bf16

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model:
        ours = LongDocumentClassifier.from_pretrained(args.model).eval()
    else:
        recipe = load_recipe(None, ["backbone.name=minilm", "backbone.attention_dropout=0.0", "strategy.name=chunk",
                                    "strategy.window=510", "strategy.pooling=mean", "strategy.token_pooling=mean"])
        ours = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"]).eval()
    config = ours.backbone.config
    texts = long_reviews(args.documents, ours.tokenizer)
    documents, _ = ours.tokenize(texts)
    folder = resolve_backbone(MINILM)
    network = BertNN(AutoModel.from_pretrained(folder), num_labels=2)
    network.linear = torch.nn.Linear(config.hidden_size, 2)  # belt-nlp's head resized to MiniLM's 384
    belt = BertClassifierWithPooling(num_labels=2, batch_size=args.batch_size, learning_rate=5e-5, epochs=1,
                                     chunk_size=510, stride=510, minimal_chunk_length=1, pooling_strategy="mean",
                                     neural_network=network, pretrained_model_name_or_path=str(folder), device="cpu")
    belt.neural_network.eval()
    with torch.no_grad():
        seconds, _ = fastest(lambda: belt.predict_scores(texts, args.batch_size), args.repeats)
    rows = {"belt-nlp fp32": {"seconds": seconds}}
    bf16 = fast_bf16("cpu")
    peaks = {"fp32": peak_matmul(config, torch.float32, 5)}
    if bf16:
        peaks["bf16"] = peak_matmul(config, torch.bfloat16, 5)
    check = first_reviews(args.agreement_documents)
    reference = None
    for precision in ["fp32"] + (["bf16"] if bf16 else []):
        for runtime in ("torch", "openvino"):
            started = time.perf_counter()
            if runtime == "openvino":
                runner = OpenVINOModel(ours, precision, threads=args.threads)
                runner.predict(texts[:1])
                read = lambda batch, r=runner: r(batch)  # noqa: E731
            else:
                runner = ours
                runner.predict(texts[:1], precision=precision)
                cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

                def read(batch, cast=cast):
                    with torch.no_grad(), cast:
                        return ours(batch)
            first = time.perf_counter() - started
            seconds, _ = fastest(lambda r=runner, p=precision: r.predict(texts, args.batch_size, p), args.repeats)
            row = {"seconds": seconds, "first_call_seconds": first,
                   **encoder_rate(read, documents, args.batch_size, config, args.repeats)}
            row["share_of_matmul_peak"] = row["useful_flop_per_second"] / peaks[precision]["peak"]
            if check:
                got = probabilities_of(runner.predict(check, args.batch_size, precision))
                reference = got if reference is None else reference
                row["label_agreement_with_torch_fp32"] = agreement(got.argmax(1).tolist(),
                                                                   reference.argmax(1).tolist())
                row["max_abs_probability_difference"] = float((got - reference).abs().max())
            rows[f"longbert {runtime} {precision}"] = row
            print(f"{runtime} {precision}: {len(texts) / seconds:.2f} documents/s", flush=True)
    base = rows["belt-nlp fp32"]["seconds"]
    for row in rows.values():
        row["documents_per_second"] = len(texts) / row["seconds"]
        row["times_belt"] = base / row["seconds"]
    import openvino

    return {"command": " ".join(["python", "benchmarks/bench_runtime.py", *sys.argv[1:]]),
            "machine": describe_machine(), "openvino": openvino.__version__,
            "settings": {"documents": len(texts), "agreement_documents": len(check), "batch_size": args.batch_size,
                         "repeats": args.repeats, "threads": args.threads, "chunk_size": 510, "pooling": "mean",
                         "belt_nlp": "1.1.0", "model": args.model or "untrained head (seed 0)"},
            "matmul_peak_flop_per_second": {k: v["peak"] for k, v in peaks.items()}, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=64)
    parser.add_argument("--agreement-documents", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", help="a trained model folder (default: MiniLM with an untrained chunk head)")
    parser.add_argument("-o", "--output", type=Path, default=RESULTS / "runtime.json")
    args = parser.parse_args()
    result = measure(args)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    for name, row in result["rows"].items():
        extra = "".join([
            f", {100 * row['share_of_matmul_peak']:.0f}% of peak" if "share_of_matmul_peak" in row else "",
            f", padding {100 * row['padding_share_of_executed_tokens']:.1f}%"
            if "padding_share_of_executed_tokens" in row else "",
            f", labels agree {100 * row['label_agreement_with_torch_fp32']:.2f}%, max |Δp| "
            f"{row['max_abs_probability_difference']:.2g}" if "label_agreement_with_torch_fp32" in row else ""])
        print(f"{name:<24} {row['documents_per_second']:6.2f} documents/s  {row['times_belt']:.2f}× belt-nlp{extra}")
    print(f"capability {result['machine']['cpu_capability']}; written to {args.output}")


if __name__ == "__main__":
    main()
