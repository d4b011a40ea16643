"""Speed and memory of the `bigbird` strategy, side by side with transformers' BigBirdModel (block-sparse) and
plain chunking, on the same MiniLM weights and the same documents.

    python benchmarks/bench_bigbird.py            # 1,024 / 2,048 / 4,096 / 8,192 tokens, 5 timed forwards each
    python benchmarks/bench_bigbird.py --quick    # 1,024 and 2,048 tokens, 1 timed forward: checks that it all runs

What is measured: one document per forward, inference (eval mode, no_grad), fp32 and bf16 autocast.
  longbert-bigbird          this strategy as evaluated: 2 global blocks + a 3-block window (random blocks are off
                            at evaluation), block 64, MiniLM with positions extended by copying
  longbert-bigbird-random   the same with its 3 random blocks on (the training pattern), for a like-for-like
                            count of key blocks with transformers' BigBird
  transformers-bigbird      transformers' BigBirdModel, attention_type="block_sparse", block 64, 3 random blocks,
                            MiniLM's weights copied in, positions extended the same way
  chunk                     the `chunk` strategy: 510-token chunks through plain MiniLM (sdpa), all in one pass
Every configuration runs in a fresh subprocess, so each peak is its own: peak_memory_mb is the process's peak
resident set size during its first forward (longbert.utils.hardware.measure), model_memory_mb the resident size just
before it (weights, runtime), forward_memory_mb the difference. Time is the median of the timed forwards after
that first one. Documents are random token ids from a fixed seed: attention cost does not depend on the words.

Writes benchmarks/results/bigbird.json (or --output) and prints a table.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

from isolated import error_text, measure_forwards, run_each, run_isolated, table_printer, write_results
from isolated import find as find_result

LENGTHS = [1024, 2048, 4096, 8192]
QUICK_LENGTHS = [1024, 2048]
SYSTEMS = ["longbert-bigbird", "longbert-bigbird-random", "transformers-bigbird", "chunk"]
PRECISIONS = ["fp32", "bf16"]
BLOCK, WINDOW, GLOBAL, RANDOM = 64, 3, 2, 3
RESULTS = Path(__file__).resolve().parent / "results" / "bigbird.json"


# -- one configuration, in its own process ---------------------------------------------------------------------


def _release_freed_memory() -> None:
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _quiet():
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def build_forward(system: str, max_tokens: int):
    """A callable running one forward of a (T,) content-id document (no [CLS]/[SEP]) through `system`."""
    import torch
    from transformers import AutoTokenizer

    from longbert.modeling.backbone import load_backbone, resolve_backbone
    from longbert.strategies.base import PassBudget, SpecialTokens

    special = SpecialTokens.from_tokenizer(AutoTokenizer.from_pretrained(resolve_backbone("minilm")))
    budget = PassBudget(max_windows=64, max_tokens=max_tokens)

    if system == "transformers-bigbird":
        model = transformers_bigbird(max_tokens, "block_sparse").eval()

        def forward(ids):
            full = torch.cat([torch.tensor([special.cls_id]), ids, torch.tensor([special.sep_id])])[None]  # (1, L)
            return model(input_ids=full).last_hidden_state[:, 0]  # (1, H)

        return forward

    backbone, _ = load_backbone("minilm", attention_dropout=0.0, hidden_dropout=0.0)
    if system.startswith("longbert-bigbird"):
        from longbert.strategies.bigbird import BigBirdStrategy
        from longbert.strategies.configs import BigBirdConfig

        config = BigBirdConfig(max_tokens=max_tokens, block_size=BLOCK, window_blocks=WINDOW, global_blocks=GLOBAL,
                               random_blocks=RANDOM, full_attention_up_to=512, token_pooling="cls")
        strategy = BigBirdStrategy(config, backbone.config.hidden_size, special, budget)
        strategy.adapt_backbone(backbone)
        # The random pattern is drawn in training mode; dropout is 0, so nothing else changes.
        backbone.train(system == "longbert-bigbird-random")
    elif system == "chunk":
        from longbert.strategies.chunk import ChunkStrategy
        from longbert.strategies.configs import ChunkConfig

        config = ChunkConfig(window=510, token_pooling="cls")
        strategy = ChunkStrategy(config, backbone.config.hidden_size, special, budget)
        strategy.adapt_backbone(backbone)
        backbone.eval()
    else:
        raise ValueError(f"unknown system {system!r}")
    return lambda ids: strategy.encode(backbone, [ids]).vectors  # (1, N, H)


def transformers_bigbird(max_tokens: int, attention_type: str):
    """transformers' BigBirdModel with MiniLM's sizes and weights, read straight from MiniLM's safetensors (so no
    second copy of the model stays in memory), positions extended by the same function as ours. The model is built
    with `max_tokens` positions from the start: its block-sparse attention sizes its random plan at construction."""
    from types import SimpleNamespace

    from safetensors.torch import load_file
    from torch import nn
    from transformers import AutoConfig, BigBirdModel
    from transformers import BigBirdConfig as HFBigBirdConfig

    from longbert.modeling.backbone import resolve_backbone
    from longbert.strategies.bigbird import extend_positions

    reference = Path(resolve_backbone("minilm"))
    c = AutoConfig.from_pretrained(reference)
    config = HFBigBirdConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size, hidden_act=c.hidden_act,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=max_tokens,
        type_vocab_size=c.type_vocab_size, layer_norm_eps=c.layer_norm_eps, pad_token_id=c.pad_token_id,
        attention_type=attention_type, block_size=BLOCK, num_random_blocks=RANDOM, use_bias=True,
        rescale_embeddings=False,
    )
    model = BigBirdModel(config, add_pooling_layer=False)
    wanted = model.state_dict().keys()
    state = {k: v for k, v in load_file(reference / "model.safetensors").items() if k in wanted}
    missing = sorted(set(wanted) - set(state))
    if missing:
        raise RuntimeError(f"MiniLM's weights do not cover BigBirdModel: missing {missing}")
    # The learned 512 positions, extended exactly as `adapt_backbone` extends them.
    table = nn.Module()
    table.config = SimpleNamespace(max_position_embeddings=c.max_position_embeddings)
    table.embeddings = nn.Module()
    table.embeddings.position_embeddings = nn.Embedding.from_pretrained(state["embeddings.position_embeddings.weight"])
    extend_positions(table, max_tokens)
    state["embeddings.position_embeddings.weight"] = table.embeddings.position_embeddings.weight.detach()
    model.load_state_dict(state)
    return model


def run_one(spec: dict) -> dict:
    """Build one system, run one document `repeats + 1` times; returns the measurements (or the error)."""
    import torch

    _quiet()
    torch.set_num_threads(spec["threads"])
    forward = build_forward(spec["system"], spec["max_tokens"])
    ids = torch.randint(1000, 30000, (spec["tokens"] - 2,), generator=torch.Generator().manual_seed(0))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=spec["precision"] == "bf16")
    out = dict(spec)
    _release_freed_memory()  # e.g. the MiniLM copy transformers' BigBird was built from, so peaks compare fairly
    try:
        with torch.no_grad(), autocast:
            measured, _ = measure_forwards(lambda: forward(ids), spec["repeats"], spec["tokens"])
    except Exception as error:  # recorded, not raised: a failing system is a result (bf16 in transformers' BigBird)
        out["error"] = error_text(error)
        return out
    out.update(measured)
    return out


def check_weights(threads: int) -> dict:
    """transformers' BigBird with the copied weights in full-attention mode reproduces MiniLM on 300 tokens."""
    import torch

    from longbert.modeling.backbone import load_backbone

    _quiet()
    torch.set_num_threads(threads)
    backbone, _ = load_backbone("minilm", attention_dropout=0.0, hidden_dropout=0.0)
    backbone.eval()
    ids = torch.randint(1000, 30000, (1, 300), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = backbone(input_ids=ids).last_hidden_state
        got = transformers_bigbird(1024, "original_full").eval()(input_ids=ids).last_hidden_state
    return {"max_abs_diff_vs_minilm_300_tokens": float((got - want).abs().max())}


# -- the driver ------------------------------------------------------------------------------------------------


def summarise(results: list[dict]) -> dict:
    """Ratios at each length: transformers' BigBird over ours (time and peak memory), ours per token."""
    find = functools.partial(find_result, results)

    summary = {}
    for tokens in sorted({r["tokens"] for r in results}):
        ours, theirs = find("longbert-bigbird", "fp32", tokens), find("transformers-bigbird", "fp32", tokens)
        ours_random = find("longbert-bigbird-random", "fp32", tokens)
        row = {}
        if ours and theirs:
            row["speedup_vs_transformers_fp32"] = round(theirs["seconds"] / ours["seconds"], 2)
            for kind in ("peak_memory_mb", "forward_memory_mb"):
                if ours[kind] is not None and theirs[kind] is not None:
                    name = kind.replace("_mb", "_ratio_ours_over_transformers_fp32")
                    row[name] = round(ours[kind] / max(theirs[kind], 1.0), 2)
        if ours_random and theirs:
            speedup = round(theirs["seconds"] / ours_random["seconds"], 2)
            row["speedup_vs_transformers_fp32_with_random_blocks"] = speedup
        for precision in PRECISIONS:
            mine = find("longbert-bigbird", precision, tokens)
            if mine:
                row[f"ours_us_per_token_{precision}"] = mine["us_per_token"]
        summary[str(tokens)] = row
    return summary


print_table = table_printer(
    [("system", "system", "<25"), ("prec", "precision", "<5"), ("tokens", "tokens", ">6"),
     ("seconds", "seconds", ">8.3f"), ("us/token", "us_per_token", ">9.1f"), ("peak MB", "peak_memory_mb", ">8.0f"),
     ("fwd MB", "forward_memory_mb", ">7.0f")], keys=3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,024 and 2,048 tokens, 1 timed forward each")
    parser.add_argument("--lengths", type=int, nargs="+", help="document lengths in tokens, with [CLS]/[SEP]")
    parser.add_argument("--repeats", type=int, help="timed forwards per configuration (after the first)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's default for this machine)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed to one configuration")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--check-weights", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    threads = args.threads or torch.get_num_threads()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    if args.check_weights:
        print(json.dumps(check_weights(threads)))
        return

    from longbert.utils.hardware import describe_machine

    lengths = args.lengths or (QUICK_LENGTHS if args.quick else LENGTHS)
    repeats = args.repeats or (1 if args.quick else 5)
    max_tokens = max(lengths)
    weights = run_isolated(__file__, ["--check-weights", "--threads", str(threads)], args.timeout)
    print(f"transformers' BigBird with MiniLM's weights, full attention, vs MiniLM: {weights}", flush=True)
    specs = [dict(system=system, precision=precision, tokens=tokens, repeats=repeats, threads=threads,
                  max_tokens=max_tokens)
             for tokens in lengths for system in SYSTEMS for precision in PRECISIONS]
    results = run_each(__file__, specs, args.timeout, ["system", "precision", "tokens"],
                       lambda r: f"{r['seconds']:.3f}s, peak {r['peak_memory_mb']} MB")
    report = {
        "benchmark": "bigbird forward (inference), one document per forward",
        "machine": describe_machine(),
        "settings": {"lengths": lengths, "repeats": repeats, "threads": threads, "block_size": BLOCK,
                     "window_blocks": WINDOW, "global_blocks": GLOBAL, "random_blocks": RANDOM,
                     "max_tokens": max_tokens, "chunk_window": 510, "backbone": "minilm (all-MiniLM-L6-v2)",
                     "quick": args.quick},
        "weights_check": weights,
        "results": results,
        "summary": summarise(results),
    }
    write_results(args.output, report, print_table)


if __name__ == "__main__":
    main()
