"""A probe, not a feature: OpenVINO's int8 (NNCF post-training quantization) of the chunk encoder against OpenVINO
bf16 and torch fp32, in one process. longbert's `--runtime openvino` does not offer int8; this says what it would be
worth. nncf is not a longbert dependency:

    python -m venv --system-site-packages /tmp/nvenv && /tmp/nvenv/bin/pip install nncf==3.4.0
    /tmp/nvenv/bin/python benchmarks/scripts/openvino_int8_probe.py     # benchmarks/results/openvino-int8-probe.json

MiniLM with an untrained chunk head (seed 0), as bench_runtime.py. Calibration: the backbone passes of IMDb test
reviews 1,000 to 1,299, laid out as predict lays them out (no labels read). Speed: the first 64 test reviews longer
than 512 tokens, texts in, the fastest of 2 rounds. Agreement: the first 1,000 test reviews against torch fp32 (the
untrained head's probabilities sit near 0.5, so labels flip at the smallest change: a harsh test).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_belt import fastest, long_reviews  # noqa: E402
from bench_runtime import probabilities_of  # noqa: E402
from bench_serve import reviews as first_reviews  # noqa: E402

OUTPUT = Path(__file__).resolve().parents[1] / "results" / "openvino-int8-probe.json"


def main() -> None:
    import nncf
    import openvino

    from longbert.config import load_recipe
    from longbert.inference.openvino_runtime import OpenVINOModel, compiled_encoder, converted_encoder
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.strategies.windows import run_passes
    from longbert.utils.hardware import describe_machine

    torch.set_num_threads(2)
    torch.manual_seed(0)
    recipe = load_recipe(None, ["backbone.name=minilm", "backbone.attention_dropout=0.0", "strategy.name=chunk",
                                "strategy.window=510", "strategy.pooling=mean", "strategy.token_pooling=mean"])
    model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"]).eval()
    texts = long_reviews(64, model.tokenizer)
    reviews = first_reviews(1300)
    check, calibration = reviews[:1000], reviews[1000:]
    reference = probabilities_of(model.predict(check, 16, "fp32"))
    runtime = OpenVINOModel(model, "bf16", threads=2)
    rows = {}

    def row(name: str) -> None:
        seconds, _ = fastest(lambda: runtime.predict(texts, 16), 2)
        got = probabilities_of(runtime.predict(check, 16))
        rows[name] = {"documents_per_second": len(texts) / seconds,
                      "label_agreement_with_torch_fp32": float((got.argmax(1) == reference.argmax(1)).float().mean()),
                      "max_abs_probability_difference": float((got - reference).abs().max())}
        print(name, rows[name], flush=True)

    row("openvino bf16")
    documents, _ = model.tokenize(calibration)
    feeds = []

    def record(input_ids, attention_mask):  # each pass as predict lays it out, kept as a calibration sample
        feeds.append({0: input_ids.numpy(), 1: attention_mask.numpy()})
        return torch.zeros(input_ids.shape[0], 1)

    run_passes([w for d in documents for w in model.strategy.windows(d)[0]], model.strategy.special,
               model.settings.budget, record)
    graph = converted_encoder(openvino, model)
    started = time.perf_counter()
    quantized = nncf.quantize(graph, nncf.Dataset(feeds), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(feeds))
    quantize_seconds = time.perf_counter() - started
    for precision, hint in (("bf16", "bf16"), ("fp32", "f32")):  # what runs outside the int8 matmuls
        runtime.encoder = compiled_encoder(openvino, quantized, precision, threads=2)
        row(f"openvino int8 (rest {hint})")
    OUTPUT.write_text(json.dumps({
        "command": "python benchmarks/scripts/openvino_int8_probe.py", "machine": describe_machine(),
        "openvino": openvino.__version__, "nncf": nncf.__version__, "calibration_passes": len(feeds),
        "quantize_seconds": quantize_seconds, "rows": rows}, indent=2) + "\n")
    print(f"written to {OUTPUT}")


if __name__ == "__main__":
    main()
