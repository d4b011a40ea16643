"""Every supported architecture with every strategy: tiny random models of BERT, RoBERTa, XLM-R, DistilBERT, ALBERT,
ELECTRA, DeBERTa-v2 (v3 is the same class) and ModernBERT, each saved to disk with a tokenizer of its own kind
(WordPiece, byte-level BPE or Unigram, trained in-process on real IMDb reviews, with the architecture's special
tokens). A combination either trains, saves, reloads and predicts the same probabilities, or is refused with one
line naming why (the matrix `REFUSED`)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
import torch

from helpers import TINY_STRATEGY_SETTINGS
from longbert.config import load_recipe
from longbert.errors import LongbertError
from longbert.modeling.backbone import load_encoder
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.strategies.registry import strategy_names

BERT_TOKENS = [("pad_token", "[PAD]"), ("unk_token", "[UNK]"), ("cls_token", "[CLS]"), ("sep_token", "[SEP]"),
               ("mask_token", "[MASK]")]
ROBERTA_TOKENS = [("cls_token", "<s>"), ("pad_token", "<pad>"), ("sep_token", "</s>"), ("unk_token", "<unk>"),
                  ("mask_token", "<mask>")]
ALBERT_TOKENS = [("pad_token", "<pad>"), ("unk_token", "<unk>"), ("cls_token", "[CLS]"), ("sep_token", "[SEP]"),
                 ("mask_token", "[MASK]")]
DEBERTA_TOKENS = [("pad_token", "[PAD]"), ("cls_token", "[CLS]"), ("sep_token", "[SEP]"), ("unk_token", "[UNK]"),
                  ("mask_token", "[MASK]")]
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=128)


def bert(ids):
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(**SMALL, **ids), add_pooling_layer=False)


def roberta(ids):  # RoBERTa's position table starts after the padding index: 130 rows hold 128 positions
    from transformers import RobertaConfig, RobertaModel

    return RobertaModel(RobertaConfig(**{**SMALL, "max_position_embeddings": 130}, **ids), add_pooling_layer=False)


def xlm_roberta(ids):
    from transformers import XLMRobertaConfig, XLMRobertaModel

    config = XLMRobertaConfig(**{**SMALL, "max_position_embeddings": 130}, **ids)
    return XLMRobertaModel(config, add_pooling_layer=False)


def distilbert(ids):
    from transformers import DistilBertConfig, DistilBertModel

    return DistilBertModel(DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=128,
                                            **ids))


def albert(ids):  # embeddings smaller than the hidden states, layers sharing weights, as in every released ALBERT
    from transformers import AlbertConfig, AlbertModel

    return AlbertModel(AlbertConfig(**SMALL, embedding_size=16, **ids), add_pooling_layer=False)


def electra(ids, embedding_size=16):  # ELECTRA-small's embeddings are smaller than its hidden states
    from transformers import ElectraConfig, ElectraModel

    return ElectraModel(ElectraConfig(**SMALL, embedding_size=embedding_size, **ids))


def deberta_v2(ids):  # DeBERTa-v3's settings: relative positions only, log buckets
    from transformers import DebertaV2Config, DebertaV2Model

    return DebertaV2Model(DebertaV2Config(**SMALL, relative_attention=True, position_buckets=32,
                                          pos_att_type=["p2c", "c2p"], position_biased_input=False, **ids))


def modernbert(ids):  # rotary positions; every second layer attends locally, as in ModernBERT-base
    from transformers import ModernBertConfig, ModernBertModel

    return ModernBertModel(ModernBertConfig(**SMALL, global_attn_every_n_layers=2, local_attention=16,
                                            cls_token_id=ids["bos_token_id"], sep_token_id=ids["eos_token_id"], **ids))


# name -> (tokenizer model, special tokens in id order, model builder)
ARCHITECTURES = {
    "bert": ("wordpiece", BERT_TOKENS, bert),
    "roberta": ("bpe", ROBERTA_TOKENS, roberta),
    "xlm-roberta": ("unigram", ROBERTA_TOKENS, xlm_roberta),
    "distilbert": ("wordpiece", BERT_TOKENS, distilbert),
    "albert": ("unigram", ALBERT_TOKENS, albert),
    "electra": ("wordpiece", BERT_TOKENS, electra),
    "deberta-v2": ("unigram", DEBERTA_TOKENS, deberta_v2),
    "modernbert": ("bpe", BERT_TOKENS, modernbert),
}

# The combinations that cannot work, and the reason their one-line refusal gives.
REFUSED = {
    ("distilbert", "recurrence"): "needs attention modules that know their layer index",
    ("albert", "recurrence"): "needs attention modules that know their layer index",
    ("albert", "rmt"): "input embeddings have size 16",
    ("electra", "rmt"): "input embeddings have size 16",
    ("deberta-v2", "bigbird"): "learned absolute position table",
    ("deberta-v2", "recurrence"): "AttentionInterface",
    ("modernbert", "bigbird"): "learned absolute position table",
    ("modernbert", "recurrence"): "sliding-window",
}

# The attention query/value projections LoRA adapts by default.
LORA_DEFAULTS = {"bert": {"query", "value"}, "roberta": {"query", "value"}, "xlm-roberta": {"query", "value"},
                 "distilbert": {"q_lin", "v_lin"}, "albert": {"query", "value"}, "electra": {"query", "value"},
                 "deberta-v2": {"query_proj", "value_proj"}, "modernbert": {"Wqkv"}}


@pytest.fixture(scope="session")
def imdb_texts(imdb_slice) -> list[str]:
    return [json.loads(line)["text"] for line in (imdb_slice / "train.jsonl").read_text().splitlines()]


def train_tokenizer(kind: str, specials: list[tuple[str, str]], texts: list[str]):
    """A fast tokenizer of `kind` trained on `texts`, special tokens first (in `specials`' order), wrapping each
    text as cls text sep."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokens = list(dict.fromkeys(t for _, t in specials))
    role = dict(specials)
    if kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token=role["unk_token"]))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=600, special_tokens=tokens)
    elif kind == "bpe":
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=tokens,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=600, special_tokens=tokens, unk_token=role["unk_token"])
    tokenizer.train_from_iterator(texts, trainer)
    cls, sep = role["cls_token"], role["sep_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B {sep}",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **role)


@pytest.fixture(scope="session")
def architecture_dir(tmp_path_factory, imdb_texts):
    """name -> a folder holding a tiny random model of that architecture and its trained tokenizer (made once)."""

    @lru_cache(maxsize=None)
    def make(name: str, **overrides) -> str:
        kind, specials, builder = ARCHITECTURES[name]
        tokenizer = train_tokenizer(kind, specials, imdb_texts)
        ids = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                   bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id)
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(name)
        builder(ids, **overrides).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return str(folder)

    return make


def recipe_for(backbone: str, strategy: str, extra=()):
    # Documents cut at 100 tokens: several chunks, windows and segments each, and block-sparse in bigbird (> 64).
    return load_recipe(None, [f"backbone.name={backbone}", f"strategy.name={strategy}",
                              *TINY_STRATEGY_SETTINGS[strategy], "data.max_document_tokens=100", *extra])


def train_save_reload(recipe, texts: list[str], folder: Path) -> LongDocumentClassifier:
    """Two optimizer steps on `texts`, then save and reload; asserts that the backbone learned (full fine-tuning),
    and that the reloaded model predicts exactly what the trained one does. Returns the trained model."""
    torch.manual_seed(0)
    model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"]).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    documents, _ = model.tokenize(texts)
    labels = torch.tensor([i % 2 for i in range(len(texts))])
    before = {n: p.detach().clone() for n, p in model.backbone.named_parameters() if p.requires_grad}
    for _ in range(2):
        loss = model.loss(model(documents).logits, labels)
        assert torch.isfinite(loss)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    changed = [n for n, p in model.backbone.named_parameters() if n in before and not torch.equal(p, before[n])]
    assert changed, "no backbone weight changed in training"
    expected = model.predict(texts)
    model.save_pretrained(folder)
    reloaded = LongDocumentClassifier.from_pretrained(folder)
    assert reloaded.predict(texts) == expected
    return model


@pytest.mark.parametrize("strategy", strategy_names())
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_every_architecture_with_every_strategy(name, strategy, architecture_dir, imdb_texts, tmp_path):
    recipe = recipe_for(architecture_dir(name), strategy)
    reason = REFUSED.get((name, strategy))
    if reason is not None:
        with pytest.raises(LongbertError, match=reason) as refused:
            LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"])
        assert f"strategy {strategy}" in str(refused.value) and "\n" not in str(refused.value)
        return
    train_save_reload(recipe, imdb_texts[:2], tmp_path / "model")


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_lora_adapts_each_architectures_attention_by_default(name, architecture_dir, imdb_texts, tmp_path):
    recipe = recipe_for(architecture_dir(name), "chunk", ["model.finetune=lora"])
    assert recipe.model.lora.target_modules is None
    model = train_save_reload(recipe, imdb_texts[:2], tmp_path / "model")
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in model.backbone.named_parameters() if "lora_A" in n}
    assert adapted == LORA_DEFAULTS[name]
    assert json.loads((tmp_path / "model" / "longbert_config.json").read_text())["lora"]["target_modules"] is None


def test_explicit_lora_targets_are_used_and_checked(architecture_dir):
    backbone = architecture_dir("distilbert")
    recipe = recipe_for(backbone, "chunk", ["model.finetune=lora", "model.lora.target_modules=[q_lin, k_lin]"])
    model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"])
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in model.backbone.named_parameters() if "lora_A" in n}
    assert adapted == {"q_lin", "k_lin"}
    with pytest.raises(LongbertError, match="the backbone has no module named 'query' .DistilBertModel"):
        LongDocumentClassifier.from_recipe(recipe_for(backbone, "chunk", [
            "model.finetune=lora", "model.lora.target_modules=[query]"]), ["neg", "pos"])


@pytest.mark.parametrize("name, implementation", [("bert", "sdpa"), ("modernbert", "sdpa"), ("deberta-v2", "eager")])
def test_attention_implementation_is_chosen_per_model(name, implementation, architecture_dir):
    assert load_encoder(architecture_dir(name)).config._attn_implementation == implementation


def test_rmt_works_on_electra_whose_embeddings_have_the_hidden_size(architecture_dir, imdb_texts, tmp_path):
    """ELECTRA-base and -large embed at the hidden size (only -small projects up), so rmt can feed memory back."""
    train_save_reload(recipe_for(architecture_dir("electra", embedding_size=32), "rmt"), imdb_texts[:2],
                      tmp_path / "model")


def test_positions_of_a_roberta_table_start_after_its_padding_index(architecture_dir, imdb_texts):
    """130 rows hold 128 positions: a window of 126 content tokens fits with [CLS]/[SEP], 127 is refused."""
    backbone = architecture_dir("roberta")
    model = LongDocumentClassifier.from_recipe(
        load_recipe(None, [f"backbone.name={backbone}", "strategy.name=chunk", "strategy.window=126"]), ["neg", "pos"])
    documents, _ = model.eval().tokenize(imdb_texts[:2])
    assert max(d.shape[0] for d in documents) > 126
    assert model(documents).logits.shape == (2, 2)
    with pytest.raises(LongbertError, match=r"at most 126\), got 127"):
        LongDocumentClassifier.from_recipe(
            load_recipe(None, [f"backbone.name={backbone}", "strategy.name=chunk", "strategy.window=127"]),
            ["neg", "pos"])
