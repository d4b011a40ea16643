"""An ensemble model: two or more longbert models whose class probabilities are averaged, document by document, as
compare's ensemble and seed-average rows average them. It is one model folder, loaded like any other:

    <dir>/            the first member's model folder, as `save_model_folder` writes it
    <dir>/members/    the other members, each a model folder of its own (members/1, members/2, ...)
    <dir>/ensemble.json   EnsembleFacts: each member's name, how the members were chosen, the validation scores
    <dir>/ensemble_lexical/   a hybrid ensemble's TF-IDF half (`longbert hybrid ENSEMBLE`), mixed into the members'
                          mean probabilities as a hybrid's half is mixed into one model's (longbert.modeling.lexical)

`LongDocumentClassifier.from_pretrained` finds members/ and loads them into `model.ensemble`; `forward` then returns
the log of the members' mean probabilities (a hybrid ensemble's: that mean mixed with its TF-IDF half), so predict,
evaluate, serve, explain, int8 and the transformers pipeline read an ensemble as they read one model. The members share
one tokenization (the same vocabulary and max_document_tokens are required when the ensemble is made); each reads the
documents with its own strategy. A member may be a hybrid; it may not be an ensemble. Single-label only: averaged
multi-label probabilities would need thresholds of their own, tuned on validation.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import torch
from torch import nn

from longbert.errors import LongbertError
from longbert.modeling.lexical import LexicalModel
from longbert.utils.folders import ENSEMBLE_FILE, LEXICAL_DIR, MEMBERS_DIR

if TYPE_CHECKING:
    from longbert.modeling.classifier import LongDocumentClassifier


@dataclass
class EnsembleFacts:
    """What an ensemble folder says of its members: their names (the first is the folder's own model), how they were
    chosen ('validation macro_f1 among 4 groups of 2 or more', or 'all the runs given'), and the validation score of
    each member and of their average by `metric` (None where unknown)."""

    members: list[str]
    chosen_by: str
    metric: str | None = None
    validation: dict[str, float] | None = None  # member name -> score; "ensemble" -> the average's

    @classmethod
    def from_file(cls, path: Path) -> EnsembleFacts:
        try:
            data = json.loads(path.read_text())
            facts = cls(**data)
        except (ValueError, TypeError) as error:
            raise LongbertError(f"{path} is damaged or not an ensemble's facts: {error}") from None
        if not isinstance(facts.members, list) or len(facts.members) < 2:
            raise LongbertError(f"{path}: an ensemble names two or more members, got {facts.members!r}")
        return facts


class Ensemble(nn.Module):
    """The members of an ensemble other than the model that holds it (`model.ensemble`), its facts, and for a hybrid
    ensemble the TF-IDF half (`lexical`, a `LexicalModel`) mixed into the members' mean."""

    def __init__(self, others: list[LongDocumentClassifier], facts: EnsembleFacts, lexical=None):
        super().__init__()
        self.others = nn.ModuleList(others)
        self.facts = facts
        self.lexical = lexical

    def members(self, first: LongDocumentClassifier) -> list[LongDocumentClassifier]:
        return [first, *self.others]

    def others_probabilities(self, documents: list[torch.Tensor], device,
                             calibrated: bool = True) -> list[torch.Tensor]:
        """Each other member's (B, C) probabilities of `documents`, on `device` (`calibrated`: as the member answers
        alone, with its own calibration; else as its logits give them)."""
        return [member.probabilities(member(documents).logits, calibrated).to(device) for member in self.others]

    def mean_probabilities(self, first_logits: torch.Tensor, documents: list[torch.Tensor]) -> torch.Tensor:
        """(B, C): the mean of the holding model's probabilities (from its logits) and every other member's on the
        same documents, each uncalibrated: the ensemble's own calibration is fitted over this mean."""
        probabilities = [first_logits.float().softmax(-1),
                         *self.others_probabilities(documents, first_logits.device, calibrated=False)]
        return torch.stack(probabilities).mean(0)

    def logits(self, first_logits: torch.Tensor, documents: list[torch.Tensor]) -> torch.Tensor:
        """(B, C): the log of the members' mean probabilities, mixed with the TF-IDF half's for a hybrid ensemble."""
        logits = self.mean_probabilities(first_logits, documents).clamp_min(1e-30).log()
        return logits if self.lexical is None else self.lexical.fuse(logits, documents)


@contextmanager
def alone(model: LongDocumentClassifier) -> Iterator[LongDocumentClassifier]:
    """The model that holds an ensemble, for the block, as the first member alone (its others detached)."""
    held = model.ensemble
    model.ensemble = None
    try:
        yield model
    finally:
        model.ensemble = held


def member_probabilities(model: LongDocumentClassifier, documents: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each member's own (B, C) probabilities of `documents`, the holding model's first: what explain reads to say
    which member was surest. Uncalibrated, as the ensemble averages them: the folder keeps the ensemble's calibration,
    not each member's."""
    others = model.ensemble.others_probabilities(documents, documents[0].device, calibrated=False)
    with alone(model):
        return [model.probabilities(model(documents).logits, calibrated=False), *others]


def check_members(models: list[LongDocumentClassifier], names: list[str]) -> None:
    """Refuse, in one line naming the member, models that cannot be averaged into one: fewer than two, multi-label,
    an ensemble already, other labels, or another tokenization (vocabulary, max_document_tokens) than the first."""
    if len(models) < 2:
        raise LongbertError(f"an ensemble needs two or more members, got {len(models)}")
    first = models[0]
    vocabulary = first.tokenizer.get_vocab()
    for name, model in zip(names, models):
        if model.multi_label:
            raise LongbertError(f"{name} is multi-label; ensembles are single-label only (averaged multi-label "
                                "probabilities would need thresholds of their own)")
        if model.ensemble is not None:
            raise LongbertError(f"{name} is an ensemble already; name its members instead")
        if model.label_names != first.label_names:
            raise LongbertError(f"{name} has labels {model.label_names}, {names[0]} has {first.label_names}: "
                                "members must predict the same labels, in the same order")
        if model.settings.max_document_tokens != first.settings.max_document_tokens:
            raise LongbertError(f"{name} reads {model.settings.max_document_tokens} tokens a document, {names[0]} "
                                f"{first.settings.max_document_tokens}: members share one tokenization")
        if model.tokenizer.get_vocab() != vocabulary:
            raise LongbertError(f"{name}'s tokenizer differs from {names[0]}'s: members share one tokenization")


def assemble_ensemble(models: list[LongDocumentClassifier], facts: EnsembleFacts) -> LongDocumentClassifier:
    """The first model, holding the others as its ensemble (checked by `check_members`)."""
    check_members(models, facts.members)
    first = models[0]
    first.ensemble = Ensemble(models[1:], facts)
    return first


def load_ensemble(directory: Path, model_class, vocab_size: int) -> Ensemble | None:
    """The other members of the ensemble folder `directory` (None for a plain model folder), and its TF-IDF half when
    it is a hybrid ensemble (read for a backbone of `vocab_size` tokens); a folder whose ensemble.json and members/
    disagree raises one LongbertError line."""
    path = directory / ENSEMBLE_FILE
    if not path.is_file():
        return None
    facts = EnsembleFacts.from_file(path)
    folders = [directory / MEMBERS_DIR / str(n) for n in range(1, len(facts.members))]
    missing = [f for f in folders if not f.is_dir()]
    if missing:
        raise LongbertError(f"{directory} is incomplete: {ENSEMBLE_FILE} names {len(facts.members)} members but "
                            f"{missing[0].relative_to(directory)} is missing")
    others = [model_class.from_pretrained(f) for f in folders]
    if any(m.ensemble is not None for m in others):
        raise LongbertError(f"{directory}: a member of an ensemble is an ensemble itself")
    lexical = None
    if (directory / LEXICAL_DIR).is_dir():  # a hybrid ensemble
        lexical = LexicalModel.load(directory / LEXICAL_DIR, vocab_size)
        if lexical is None:
            raise LongbertError(f"{directory / LEXICAL_DIR} is incomplete: it holds no TF-IDF half (lexical.json)")
    return Ensemble(others, facts, lexical)


def refuse_ensemble(model: LongDocumentClassifier, where: str, what: str) -> None:
    """One line for a path that cannot carry an ensemble: `what` names the command or call."""
    if getattr(model, "ensemble", None) is not None:
        raise LongbertError(f"{where} is an ensemble of {len(model.ensemble.facts.members)} models "
                            f"({', '.join(model.ensemble.facts.members)}); {what}")
