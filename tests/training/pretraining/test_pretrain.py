"""Continued pretraining (`longbert pretrain`): BERT's masking, token-level reading equal to the strategies' known
references, a loss that falls, a backbone folder that loads and fine-tunes, an exact resume, and one clear error per
bad recipe."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

import longbert
from helpers import StopAfterSteps
from longbert.cli import app
from longbert.config import MaskingConfig, load_pretrain_recipe
from longbert.errors import LongbertError
from longbert.modeling.backbone import load_tokenizer
from longbert.result import Result
from longbert.strategies.base import PassBudget, SpecialTokens
from longbert.strategies.bigbird import extend_positions
from longbert.strategies.configs import BigBirdConfig, RecurrenceConfig
from longbert.strategies.recurrence import distance_bucket
from longbert.strategies.registry import build_strategy
from longbert.strategies.windows import encode_tokens_in_windows
from longbert.training.pretraining.masking import IGNORE, Masker, seeded
from longbert.training.pretraining.mlm import build_model
from longbert.training.pretraining.pretrain import save_backbone
from longbert.training.stopping import TrainingInterrupted

pytestmark = pytest.mark.heavy  # trains, resumes or exports models: left out of the 1-minute subset

SPECIAL = SpecialTokens(cls_id=101, sep_id=102, pad_id=0)
SPECIAL_IDS = [0, 100, 101, 102, 103]  # [PAD] [UNK] [CLS] [SEP] [MASK] of the uncased WordPiece vocabulary
PACKAGED = Path(longbert.__file__).resolve().parent / "recipes"
# Settings that fit a strategy into the tiny backbone (128 positions).
TINY = {
    "chunk": ["strategy.name=chunk", "strategy.window=126"],
    "bigbird": ["strategy.name=bigbird", "strategy.max_tokens=256", "strategy.block_size=16",
                "strategy.full_attention_up_to=64", "strategy.random_blocks=2", "data.max_document_tokens=254"],
    "recurrence": ["strategy.name=recurrence", "strategy.segment=62", "strategy.memory=64"],
}


def documents(lengths, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1000, 30000, (n,), generator=generator) for n in lengths]


def wrapped(piece: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.tensor([SPECIAL.cls_id]), piece, torch.tensor([SPECIAL.sep_id])])[None]  # (1, L)


def plain_states(backbone, piece: torch.Tensor) -> torch.Tensor:
    """The content token states of [CLS] piece [SEP] read alone by the backbone."""
    return backbone(input_ids=wrapped(piece)).last_hidden_state[0, 1:-1]  # (T, H)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Unlabelled documents, a few of them repeated: 16 texts of about 100-200 tokens (past the tiny backbone's 128
    positions), in a folder of split files as IMDb's `unsupervised.jsonl.gz` is."""
    folder = tmp_path_factory.mktemp("unlabelled")
    texts = ["the film follows a young woman who moves to the city and finds work in a small bakery . " * 7,
             "i watched this movie twice and the second time the ending made much more sense to me . " * 9,
             "a quiet story about two brothers , their father and the farm they could not keep . " * 6,
             "the actors are fine but the script wanders and the music is far too loud in every scene . " * 8]
    with open(folder / "unsupervised.jsonl", "w") as out:
        for text in texts * 4:
            out.write(json.dumps({"text": text, "label": -1}) + "\n")
    return folder


def tiny_pretraining(backbone_dir, corpus, out, strategy="chunk", *extra):
    return [f"backbone.name={backbone_dir}", f"data.path={corpus}", *TINY[strategy], "data.heldout_fraction=0.25",
            "train.steps=12", "train.head_steps=2", "train.batch_size=4", "train.learning_rate=3e-3",
            "train.head_learning_rate=3e-3", "train.warmup_ratio=0", "train.mixed_precision=no",
            "train.log_every_steps=4", "eval.batch_size=8", f"output_dir={out}", *extra]


# -- masking ---------------------------------------------------------------------------------------------------


def test_masking_follows_bert_15_percent_80_10_10_and_never_touches_special_tokens():
    masker = Masker(MaskingConfig(), mask_id=103, special_ids=SPECIAL_IDS, vocab_size=30522)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (200_000,), generator=generator)
    special = torch.rand(ids.shape, generator=generator) < 0.05
    ids[special] = torch.tensor(SPECIAL_IDS)[torch.randint(5, (int(special.sum()),), generator=generator)]

    inputs, targets = masker(ids, seeded(7, 1, 0))
    chosen = targets != IGNORE
    assert not chosen[special].any(), "special tokens are never chosen"
    assert torch.equal(targets[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])
    assert chosen[~special].float().mean().item() == pytest.approx(0.15, abs=0.004)  # 5 standard deviations
    masked = chosen & (inputs == 103)
    kept = chosen & (inputs == ids)
    replaced = chosen & ~masked & ~kept
    n = chosen.sum().item()
    assert masked.sum().item() / n == pytest.approx(0.8, abs=0.012)
    assert replaced.sum().item() / n == pytest.approx(0.1, abs=0.009)
    assert kept.sum().item() / n == pytest.approx(0.1, abs=0.009)
    assert not torch.isin(inputs[replaced], torch.tensor(SPECIAL_IDS)).any(), "random tokens are never special"
    assert inputs[replaced].unique().numel() > 1000, "random tokens are drawn across the vocabulary"

    again_inputs, again_targets = masker(ids, seeded(7, 1, 0))
    assert torch.equal(again_inputs, inputs) and torch.equal(again_targets, targets), "seeded: the same masks"
    assert not torch.equal(masker(ids, seeded(7, 1, 1))[1], targets), "another batch, other masks"

    only_masks = Masker(MaskingConfig(probability=0.5, mask_fraction=1.0, random_fraction=0.0), 103, SPECIAL_IDS, 30522)
    inputs, targets = only_masks(ids, seeded(0))
    assert (inputs[targets != IGNORE] == 103).all()
    assert (targets != IGNORE)[~special].float().mean().item() == pytest.approx(0.5, abs=0.005)


# -- token-level reading ---------------------------------------------------------------------------------------


def make(backbone, config, budget: PassBudget | None = None):
    strategy = build_strategy(config, backbone.config.hidden_size, SPECIAL, budget or PassBudget())
    strategy.adapt_backbone(backbone)
    return strategy


def test_bigbird_tokens_with_a_window_covering_the_sequence_equal_dense_attention(tiny_backbone):
    """Block-sparse passes past the 128 learned positions, a full-attention document, an empty one, mixed in one
    batch and in bounded passes: every content token's state is the dense backbone's."""
    dense = copy.deepcopy(tiny_backbone)
    extend_positions(dense, 256)
    dense.set_attn_implementation("sdpa")
    config = BigBirdConfig(max_tokens=256, block_size=16, window_blocks=31, global_blocks=1, random_blocks=0,
                           full_attention_up_to=64, token_pooling="cls")
    strategy = make(tiny_backbone, config)
    docs = documents([250, 37, 130, 0, 300])  # the last is longer than max_tokens: its head of 254 is read
    with torch.no_grad():
        states = strategy.encode_tokens(tiny_backbone, docs)
        bounded = make(tiny_backbone, config, PassBudget(max_windows=1)).encode_tokens(tiny_backbone, docs)
        for doc, state, other in zip(docs, states, bounded):
            want = plain_states(dense, doc[:254])
            assert state.shape == want.shape
            torch.testing.assert_close(state, want, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(other, want, atol=1e-5, rtol=1e-4)


def test_bigbird_sparse_tokens_do_not_depend_on_the_batch(tiny_backbone):
    strategy = make(tiny_backbone, BigBirdConfig(max_tokens=256, block_size=16, window_blocks=1, global_blocks=2,
                                                 random_blocks=0, full_attention_up_to=0, token_pooling="cls"))
    long, short = documents([240, 70], seed=1)
    with torch.no_grad():
        together = strategy.encode_tokens(tiny_backbone, [long, short])
        alone = [strategy.encode_tokens(tiny_backbone, [d])[0] for d in (long, short)]
        # A narrow window really is sparse: the last block does not see the middle ones, as dense attention would.
        dense_like = plain_states(tiny_backbone, short)
    for a, b in zip(together, alone):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(alone[1], dense_like, atol=1e-3)


def test_recurrence_tokens_without_memory_are_plain_segments(tiny_backbone):
    strategy = make(tiny_backbone, RecurrenceConfig(segment=12, memory=0, token_pooling="cls"))
    docs = documents([40, 5, 0, 25])
    with torch.no_grad():
        states = strategy.encode_tokens(tiny_backbone, docs)
        for doc, state in zip(docs, states):
            assert state.shape[0] == len(doc)
            want = torch.cat([plain_states(tiny_backbone, doc[s : s + 12]) for s in range(0, max(len(doc), 1), 12)])
            torch.testing.assert_close(state, want, atol=1e-5, rtol=1e-5)


def test_recurrence_tokens_read_the_memory_as_encode_does(tiny_backbone):
    """The first segment is read alone; later ones through the memory (a bias of -1e4 on it: alone again); the
    document's tokens do not depend on its batch; and the segments `encode` pools are the ones read here."""
    docs = documents([36, 20, 7])
    strategy = make(tiny_backbone, RecurrenceConfig(segment=12, memory=14, token_pooling="mean", pooling="mean"))
    with torch.no_grad():
        states = strategy.encode_tokens(tiny_backbone, docs)
        alone = strategy.encode_tokens(tiny_backbone, docs[:1])[0]
        torch.testing.assert_close(states[0], alone, atol=1e-5, rtol=1e-5)
        first = plain_states(tiny_backbone, docs[0][:12])
        torch.testing.assert_close(states[0][:12], first, atol=1e-5, rtol=1e-5)
        later = plain_states(tiny_backbone, docs[0][12:24])
        assert not torch.allclose(states[0][12:24], later, atol=1e-4), "the memory changes later segments"
        strategy.distance_bias.fill_(-1e4)
        ignored = strategy.encode_tokens(tiny_backbone, docs[:1])[0]
        torch.testing.assert_close(ignored[12:24], later, atol=1e-5, rtol=1e-5)


def one_pass_reference(backbone, doc, segment: int, memory: int, table: torch.Tensor) -> torch.Tensor:
    """recurrence as documented, written as one pass of the plain backbone over all segments side by side (as
    tests/test_recurrence.py's masked reference, but every content token): each segment has positions 0..L-1; its
    queries read its own tokens and the latest `memory` tokens of the segment before, with table[:, bucket(query
    index - key index)] added on those. Returns (T, H)."""
    pieces = [wrapped(doc[s : s + segment])[0] for s in range(0, len(doc), segment)]
    segment_of = torch.cat([torch.full((len(p),), n) for n, p in enumerate(pieces)])  # (T + 2N,)
    total = len(segment_of)
    scores = torch.full((backbone.config.num_attention_heads, total, total), float("-inf"))
    for n in range(len(pieces)):
        queries = (segment_of == n).nonzero().flatten()
        scores[:, queries[:, None], queries[None, :]] = 0.0
        for key in (segment_of == n - 1).nonzero().flatten()[-memory:].tolist():
            scores[:, queries, key] = table[:, distance_bucket(queries - key)]
    positions = torch.cat([torch.arange(len(p)) for p in pieces])
    hidden = backbone(input_ids=torch.cat(pieces)[None], position_ids=positions[None],
                      attention_mask=scores[None]).last_hidden_state[0]  # (T + 2N, H)
    content = torch.cat([torch.ones(len(p), dtype=torch.bool).index_fill_(0, torch.tensor([0, len(p) - 1]), False)
                         for p in pieces])
    return hidden[content]


@pytest.mark.parametrize("memory", [14, 5])
def test_recurrence_tokens_equal_the_one_pass_reference(tiny_backbone, memory):
    strategy = make(tiny_backbone, RecurrenceConfig(segment=12, memory=memory, token_pooling="cls"))
    generator = torch.Generator().manual_seed(3)
    table = torch.randn(strategy.distance_bias.shape[1:], generator=generator)  # (A, buckets), every layer alike
    with torch.no_grad():
        strategy.distance_bias.copy_(table.expand_as(strategy.distance_bias))
        (doc,) = documents([41])  # 3 whole segments and a short one
        torch.testing.assert_close(strategy.encode_tokens(tiny_backbone, [doc])[0],
                                   one_pass_reference(tiny_backbone, doc, 12, memory, table), atol=1e-5, rtol=1e-5)


def test_plain_windows_are_chunks_read_alone(tiny_backbone):
    docs = documents([300, 3, 0])
    with torch.no_grad():
        states = encode_tokens_in_windows(tiny_backbone, docs, 126, SPECIAL, PassBudget(max_windows=2))
        for doc, state in zip(docs, states):
            want = torch.cat([plain_states(tiny_backbone, doc[s : s + 126]) for s in range(0, max(len(doc), 1), 126)])
            torch.testing.assert_close(state, want, atol=1e-5, rtol=1e-5)


# -- training --------------------------------------------------------------------------------------------------


def test_the_mlm_loss_falls_through_the_cli(tiny_backbone_dir, corpus, tmp_path):
    out = tmp_path / "run"
    recipe = tmp_path / "tiny_pretrain.yaml"
    recipe.write_text("# a tiny pretraining run\nname: tiny_pretrain\n")
    overrides = tiny_pretraining(tiny_backbone_dir, corpus, out, "chunk", "train.steps=20", "train.head_steps=4")
    result = CliRunner().invoke(app, ["pretrain", str(recipe), *[x for o in overrides for x in ("--set", o)]])
    assert result.exit_code == 0, result.output
    assert f"backbone: {out / 'backbone'}" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    heldout = metrics["heldout"]
    assert metrics["mlm_head_started_untrained"] and "started untrained" in metrics["notes"][0]
    targets = [heldout[w]["all"]["targets"] for w in ("start", "before", "after")]
    assert targets == [heldout["after"]["all"]["targets"]] * 3
    assert heldout["after"]["beyond_learned"]["targets"] > 0, "held-out targets past the 128 learned positions"
    assert heldout["after"]["all"]["loss"] < heldout["before"]["all"]["loss"] - 1.0
    losses = [entry["loss"] for entry in metrics["train_log"]]
    assert losses[-1] < losses[0] - 1.0
    assert "| all (" in (out / "metrics.md").read_text()


def test_the_backbone_folder_replaces_an_earlier_backbone_and_refuses_other_files(tiny_backbone_dir, corpus,
                                                                                 tmp_path):
    recipe = load_pretrain_recipe(None, tiny_pretraining(tiny_backbone_dir, corpus, tmp_path / "run"))
    model, tokenizer, _, _ = build_model(recipe)
    folder = tmp_path / "backbone"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(LongbertError, match="^backbone folder .* already holds files this command did not write "
                                            r"\(it has no config.json\); name a new or empty folder$"):
        save_backbone(model, tokenizer, tiny_backbone_dir, folder)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    (folder / "notes.txt").unlink()
    save_backbone(model, tokenizer, tiny_backbone_dir, folder)
    (folder / "notes.txt").write_text("mine")
    save_backbone(model, tokenizer, tiny_backbone_dir, folder)  # an earlier backbone (config.json): its files replaced
    assert (folder / "config.json").is_file() and (folder / "notes.txt").read_text() == "mine"  # the user's kept


def test_head_steps_leave_the_backbone_unchanged(tiny_backbone_dir, corpus, tmp_path):
    recipe = load_pretrain_recipe(None, tiny_pretraining(tiny_backbone_dir, corpus, tmp_path / "run", "chunk",
                                                         "train.steps=4"))
    with pytest.raises(TrainingInterrupted, match="stopped at step 2"):
        longbert.pretrain(recipe, stop=StopAfterSteps(2))
    trained = load_file(tmp_path / "run" / "checkpoint" / "model.safetensors")
    original = load_file(Path(tiny_backbone_dir) / "model.safetensors")
    for name, weight in original.items():
        assert torch.equal(trained[f"mlm.bert.{name}"], weight), name
    assert not torch.equal(trained["mlm.cls.predictions.bias"], torch.zeros_like(trained["mlm.cls.predictions.bias"]))


@pytest.fixture
def deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


def test_resume_equals_an_uninterrupted_run(tiny_backbone_dir, corpus, tmp_path, deterministic):
    """bigbird (random blocks: its generator is resumed), dropout on (the random state), accumulation over 2 batches,
    the head's steps before the stop and the backbone's after it."""
    overrides = lambda name: tiny_pretraining(tiny_backbone_dir, corpus, tmp_path / name, "bigbird", "train.steps=6",
                                              "train.gradient_accumulation=2", "backbone.hidden_dropout=0.1",
                                              "train.log_every_steps=2")
    straight = longbert.pretrain(load_pretrain_recipe(None, overrides("a")))
    stopped = load_pretrain_recipe(None, overrides("b"))
    with pytest.raises(TrainingInterrupted, match="stopped at step 3"):
        longbert.pretrain(stopped, stop=StopAfterSteps(3))
    resumed = longbert.pretrain(stopped, resume=True)
    a, b = (load_file(r.model / "model.safetensors") for r in (straight, resumed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    without_time = lambda log: [{k: v for k, v in e.items() if k not in ("tokens_per_second", "seconds")} for e in log]
    assert without_time(straight.metrics["train_log"]) == without_time(resumed.metrics["train_log"])
    assert without_time(straight.metrics["heldout_history"]) == without_time(resumed.metrics["heldout_history"])
    assert [e["when"] for e in resumed.metrics["heldout_history"]] == ["start", "before", "after"]


def test_both_loops_accumulate_through_accelerate_and_clip_only_when_gradients_sync(tiny_backbone_dir, corpus,
                                                                                     tiny_recipe, tmp_path,
                                                                                     monkeypatch):
    """Every batch goes through `accelerator.accumulate`, and the optimiser step (clipping first) happens once per
    `gradient_accumulation` batches, when accelerate says the gradients are complete: in pretraining as in
    fine-tuning."""
    import accelerate

    calls = {"accumulate": 0, "clip": 0}
    real_accumulate, real_clip = accelerate.Accelerator.accumulate, accelerate.Accelerator.clip_grad_norm_

    def accumulate(self, *models):
        calls["accumulate"] += 1
        return real_accumulate(self, *models)

    def clip(self, *args, **kwargs):
        assert self.sync_gradients, "clipped before the accumulated gradients were complete"
        calls["clip"] += 1
        return real_clip(self, *args, **kwargs)

    monkeypatch.setattr(accelerate.Accelerator, "accumulate", accumulate)
    monkeypatch.setattr(accelerate.Accelerator, "clip_grad_norm_", clip)
    longbert.pretrain(load_pretrain_recipe(None, tiny_pretraining(
        tiny_backbone_dir, corpus, tmp_path / "pre", "chunk", "train.steps=3", "train.head_steps=1",
        "train.gradient_accumulation=2")))
    assert calls == {"accumulate": 6, "clip": 3}
    calls.update(accumulate=0, clip=0)
    longbert.train(longbert.load_recipe(None, tiny_recipe + ["train.gradient_accumulation=2", "train.max_steps=2"]))
    assert calls == {"accumulate": 4, "clip": 2}


def test_the_written_backbone_loads_with_automodel_and_fine_tunes(tiny_backbone_dir, corpus, imdb_slice, tmp_path):
    from transformers import AutoModel

    run = longbert.pretrain(load_pretrain_recipe(None, tiny_pretraining(tiny_backbone_dir, corpus, tmp_path / "pre",
                                                                        "bigbird", "train.steps=3")))
    assert isinstance(run, Result) and run.model == run.folder / "backbone"
    assert run.metrics == json.loads((run.folder / "metrics.json").read_text())
    config = json.loads((run.model / "config.json").read_text())
    assert config["max_position_embeddings"] == 256 and "longbert" not in json.dumps(config)
    encoder = AutoModel.from_pretrained(run.model)
    assert type(encoder).__name__ == "BertModel" and encoder.config._attn_implementation in ("sdpa", "eager")
    trained = load_file(run.folder / "checkpoint" / "model.safetensors")
    for name, weight in encoder.state_dict().items():
        if f"mlm.bert.{name}" in trained:
            assert torch.equal(weight, trained[f"mlm.bert.{name}"]), name
    assert encoder.embeddings.position_embeddings.weight.shape[0] == 256
    assert len(load_tokenizer(str(run.model))) == 30522

    finetune = [f"backbone.name={run.model}", f"data.path={imdb_slice}", "data.label_names=[neg, pos]",
                "data.validation_fraction=0.25", "data.max_document_tokens=254", *TINY["bigbird"][:5],
                "train.epochs=1", "train.max_steps=2", "train.batch_size=8", "train.mixed_precision=no",
                "eval.batch_size=16", f"output_dir={tmp_path / 'fine'}"]
    result = longbert.train(longbert.load_recipe(None, finetune))
    assert result.metrics["steps"] == 2 and "accuracy" in result.metrics["test"]


# -- recipes and errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((PACKAGED / "pretrain").glob("*.yaml")), ids=lambda p: p.name)
def test_every_pretraining_recipe_validates_and_starts_with_its_command(path):
    recipe = load_pretrain_recipe(path)
    assert recipe.name == f"pretrain_{path.stem}", "the name it had before recipes were sorted into folders"
    header = path.read_text().split("\nname:")[0]
    assert f"longbert pretrain recipes/pretrain/{path.name}" in header, "the header comment gives the command"
    assert "measured" in header or "GPU" in header, "and says what it takes"


def test_there_are_cpu_and_gpu_pretraining_recipes():
    assert {p.name for p in (PACKAGED / "pretrain").glob("*.yaml")} >= {"imdb_cpu.yaml", "imdb_gpu.yaml"}


@pytest.mark.parametrize("overrides, message", [
    (["masking.prob=0.2"], "unknown recipe key 'masking.prob'; valid keys in masking: probability, mask_fraction, "
                           "random_fraction"),
    (["epochs=2"], "unknown recipe key 'epochs'; valid keys: name, output_dir, seed, data, backbone, strategy"),
    (["masking.mask_fraction=0.95"], "masking.mask_fraction + masking.random_fraction must be <= 1, got 0.95 + 0.1"),
    (["train.head_steps=10", "train.steps=10"], "train.head_steps must be >= 0 and < train.steps, got 10"),
    (["data.heldout_fraction=0"], "data.heldout_fraction must be between 0 and 1, got 0"),
    (["train.steps=ten"], "train.steps must be an integer, got 'ten'"),
    (["strategy.name=bigbrd"], "unknown strategy 'bigbrd'; valid strategies:"),
])
def test_a_bad_recipe_is_one_error_naming_its_yaml_path(overrides, message):
    with pytest.raises(LongbertError) as error:
        load_pretrain_recipe(None, overrides)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_bad_recipe_file_fails_through_the_cli_in_one_line(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("# bad\nname: bad\nmasking:\n  probability: 1.5\ntrain:\n  lr: 1\n")
    result = CliRunner().invoke(app, ["pretrain", str(recipe)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {recipe} has 2 problems: ")
    assert "masking.probability must be between 0 and 1, got 1.5" in lines[0]
    assert "unknown recipe key 'train.lr'; valid keys in train: steps, head_steps" in lines[0]


@pytest.mark.parametrize("command, recipe, hint", [
    ("train", "pretrain_imdb_cpu", "run it with `longbert pretrain"),
    ("pretrain", "imdb_quick", "run it with `longbert train"),
])
def test_a_recipe_given_to_the_other_command_says_which_command_runs_it(command, recipe, hint):
    result = CliRunner().invoke(app, [command, recipe])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and hint in lines[0] and recipe in lines[0]


def test_a_missing_text_column_is_one_error_and_leaves_no_run_folder(tiny_backbone_dir, corpus, tmp_path):
    recipe = load_pretrain_recipe(None, tiny_pretraining(tiny_backbone_dir, corpus, tmp_path / "run", "chunk",
                                                         "data.text_column=body"))
    with pytest.raises(LongbertError, match=r"^data.text_column 'body' not found in split 'unsupervised'; "
                                            r"columns: text, label$"):
        longbert.pretrain(recipe)
    assert not (tmp_path / "run").exists()
