"""What an evaluation pass costs besides the backbone's arithmetic: `predict_dataset` over all of IMDb's 25,000 test
reviews (batch 64, fp32) with a backbone so small that its arithmetic is next to nothing (one layer, 32 wide, random
weights, MiniLM's tokenizer and 512 positions), per strategy, twice each.

    python benchmarks/bench_host_overhead.py [STRATEGY ...]     # default: truncate chunk sliding

On a GPU the test pass of the full-data IMDb compare (reports/compare_imdb_full) read only about 360 reviews/s;
this says how much of such a pass the host's share (batching, windowing, collecting results) can explain, measured
on whatever machine runs it. It prints one line per pass; the data comes from recipes/compare/imdb_full.yaml.
"""

from __future__ import annotations

import sys
import tempfile
import time

RECIPE = "recipes/compare/imdb_full.yaml"


def tiny_backbone(folder: str) -> None:
    from transformers import AutoTokenizer, BertConfig, BertModel

    from longbert.modeling.backbone import resolve_backbone

    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_backbone("minilm")).save_pretrained(folder)


def main(strategies: list[str]) -> None:
    from longbert.comparison.orchestrator import load_splits
    from longbert.config import load_recipe, read_recipe_file, recipe_from_dict
    from longbert.evaluation.split_pass import predict_dataset
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.utils.hardware import describe_machine

    print(describe_machine(), flush=True)
    test = load_splits(load_recipe(RECIPE)).splits["test"]
    with tempfile.TemporaryDirectory() as folder:
        tiny_backbone(folder)
        for strategy in strategies:
            raw = read_recipe_file(RECIPE, "compare")
            raw["backbone"]["name"], raw["strategy"] = folder, {"name": strategy}
            model = LongDocumentClassifier.from_recipe(recipe_from_dict(raw, RECIPE), ["neg", "pos"]).eval()
            for _ in range(2):
                start = time.perf_counter()
                out = predict_dataset(model, test, 64, description=strategy, precision="fp32")
                print(f"{strategy}: {len(test)} documents in {time.perf_counter() - start:.1f} s "
                      f"({out['speed']['documents_per_second']:.0f} documents/s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["truncate", "chunk", "sliding"])
