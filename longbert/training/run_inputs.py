"""What every stage of one fine-tuning run reads, loaded once before the first stage: the backbone with its tokenizer,
and the corpus, read, split and tokenized once.

    inputs = load_inputs(recipe, data)        # the data errors are raised here, before any stage starts
    say_what_is_read(recipe, inputs.corpus)   # the documents of each role, as the start of training says them
    inputs.backbone_for_stage()               # a copy for a stage to train; last=True: the loaded one itself
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from longbert.config import Recipe, is_multi_label
from longbert.data.documents import load_corpus
from longbert.modeling.backbone import load_backbone
from longbert.training.selective import check_frozen_layers
from longbert.utils.logs import main_process_logger

log = main_process_logger(__name__)  # on the main process only


@dataclass
class RunInputs:
    """What every stage of one run reads, made once before the first: the backbone and its tokenizer (loaded once),
    and the corpus (read, split and tokenized once). No stage reads or splits the data again, so the documents of
    each role are the run's in every stage: the head stage and the self-training teacher validate on the run's
    validation documents and never see its test documents."""

    backbone: torch.nn.Module
    tokenizer: object
    corpus: object  # longbert.data.documents.Corpus

    def backbone_for_stage(self, last: bool = False) -> torch.nn.Module:
        """The loaded backbone for a stage to train: a copy, so that the next stage starts from the weights as
        loaded, and for the run's last stage the loaded one itself."""
        return self.backbone if last else copy.deepcopy(self.backbone)


def load_inputs(recipe: Recipe, data) -> RunInputs:
    """The backbone and its tokenizer, then the data (the head's size depends on the labels), tokenized with that
    tokenizer and split once for the whole run (data errors are raised here, before any stage starts)."""
    backbone, tokenizer = load_backbone(recipe.backbone.name, recipe.backbone.attention_dropout,
                                        recipe.backbone.hidden_dropout)
    if recipe.train.reading.frozen_layers:  # what the end-to-end stage freezes, checked before the first stage
        check_frozen_layers(backbone, recipe.train.reading.frozen_layers)
    corpus = load_corpus(recipe.data, tokenizer, recipe.seed, is_multi_label(recipe.model.problem_type), source=data)
    return RunInputs(backbone, tokenizer, corpus)


def say_what_is_read(recipe: Recipe, corpus) -> None:
    """The documents of each role, and how many of them data.max_document_tokens cut, in the run's log."""
    log.info(corpus.summary())
    cut = {role: s["cut_by_token_cap"] for role, s in corpus.stats.items() if s["cut_by_token_cap"]}
    if cut:
        log.info(f"data: documents cut at data.max_document_tokens={recipe.data.max_document_tokens}: "
                 + ", ".join(f"{n} in {role}" for role, n in cut.items()))
    unlike = validation_unlike_test(recipe.data, corpus.stats)
    if unlike:
        log.warning(unlike)


def validation_unlike_test(data, stats: dict) -> str | None:
    """One line when the test is restricted to long documents (data.test_longer_than) and validation is not: the
    kept step, early stopping, the head stage's epoch and the calibration are then chosen on shorter documents than
    the model is judged on. None when validation is drawn like the test, or there is no test."""
    if "test" not in stats or "validation" not in stats or data.test_longer_than <= data.validation_rule():
        return None
    validation, test = stats["validation"], stats["test"]
    return (f"data: validation is not drawn like the test: the test holds only documents over "
            f"{data.test_longer_than} tokens ({test['documents']}, median {test['median_tokens']}), validation "
            f"{validation['documents']} documents of every length (median {validation['median_tokens']}, "
            f"{validation['over_512']} over 512), and every choice made on validation is made on them; leave "
            "data.validation_longer_than unset (null: as the test), or set it to "
            f"{data.test_longer_than}")
