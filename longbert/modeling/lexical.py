"""The lexical half of a hybrid model: TF-IDF over the token ids the backbone reads (wordpiece unigrams and bigrams)
+ logistic regression, mixed with the neural model's probabilities at a weight chosen on validation.

Why token ids rather than words: the lexical half then reads exactly what the neural half reads, from the same
input, so every way of running a model (`predict`, `evaluate`, `serve`, the transformers pipeline, which hands the
model token ids and never text) gives the same fused probabilities without carrying a second tokenizer.

Fitting uses scikit-learn (TfidfVectorizer with sublinear tf and min_df=2, LogisticRegression); the fitted numbers
are then held as torch buffers, so that running needs neither scikit-learn nor pickle:
    keys (F,)    int64 feature keys, sorted: a unigram is its token id, a bigram (a, b) is (a + 1) * V + b
    idf (F,)     scikit-learn's smoothed idf of each feature
    weight (C, F), bias (C,)   logistic regression (a binary model as two classes: a zero row and its own row)
A document's features are computed as scikit-learn computes them (1 + ln count, times idf, L2-normalised);
`tests/modeling/test_lexical.py` checks that they and the probabilities equal scikit-learn's.

Saved in a model folder as lexical.safetensors (the buffers) and lexical.json (`mix` and how it was chosen).
Single-label only: multi-label models have per-label thresholds tuned on the neural probabilities alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from torch import nn

from longbert.errors import LongbertError
from longbert.utils.atomic import json_text
from longbert.utils.folders import LEXICAL_CONFIG, LEXICAL_WEIGHTS

C_GRID = (0.5, 2.0, 8.0, 32.0)  # logistic regression's inverse regularisation strengths tried on validation
MIX_GRID = tuple(i / 20 for i in range(21))  # weights of the neural probabilities tried on validation (0: TF-IDF)


def ngram_keys(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(T,) token ids -> (2T - 1,) feature keys: every unigram, then every adjacent bigram."""
    ids = ids.long()
    return torch.cat([ids, (ids[:-1] + 1) * vocab_size + ids[1:]])


class LexicalModel(nn.Module):
    """TF-IDF + logistic regression over token-id n-grams, and the weight `mix` its probabilities are mixed at:
    fused = mix * neural + (1 - mix) * lexical."""

    def __init__(self, keys: torch.Tensor, idf: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                 vocab_size: int, mix: float, facts: dict | None = None):
        super().__init__()
        self.register_buffer("keys", keys.long())
        self.register_buffer("idf", idf.float())
        self.register_buffer("weight", weight.float())
        self.register_buffer("bias", bias.float())
        self.vocab_size = int(vocab_size)
        self.mix = float(mix)
        self.facts = dict(facts or {})  # how it was fitted and chosen: what lexical.json and the model card say

    def features(self, document: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(T,) token ids -> (feature indices (K,), their L2-normalised tf-idf values (K,)); unseen n-grams drop out."""
        document = document.to(self.keys.device)
        keys = ngram_keys(document, self.vocab_size)
        position = torch.searchsorted(self.keys, keys).clamp(max=len(self.keys) - 1)
        indices, counts = torch.unique(position[self.keys[position] == keys], return_counts=True)
        values = (1 + counts.double().log()) * self.idf[indices].double()
        norm = values.norm()
        return indices, (values / norm if norm > 0 else values).float()

    def scores(self, documents: list[torch.Tensor]) -> torch.Tensor:
        """B documents -> (B, C) logistic-regression scores (softmax gives the probabilities)."""
        rows = []
        for document in documents:
            indices, values = self.features(document)
            rows.append(self.weight[:, indices] @ values + self.bias)
        return torch.stack(rows)

    def probabilities(self, documents: list[torch.Tensor]) -> torch.Tensor:
        return self.scores(documents).softmax(-1)

    def fuse(self, neural_logits: torch.Tensor, documents: list[torch.Tensor]) -> torch.Tensor:
        """(B, C) neural logits -> (B, C) logits of the mixed probabilities (their log: softmax gives them back)."""
        neural = neural_logits.float().softmax(-1)
        mixed = self.mix * neural + (1 - self.mix) * self.probabilities(documents).to(neural.device)
        return mixed.clamp_min(torch.finfo(torch.float32).tiny).log()

    # -- on disk ----------------------------------------------------------------------------------------------

    def save(self, folder: Path) -> None:
        tensors = {"keys": self.keys, "idf": self.idf, "weight": self.weight, "bias": self.bias}
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, folder / LEXICAL_WEIGHTS)
        config = {"vocab_size": self.vocab_size, "mix": self.mix, **self.facts}
        (folder / LEXICAL_CONFIG).write_text(json_text(config, LEXICAL_CONFIG, indent=2))

    @classmethod
    def load(cls, folder: Path, vocab_size: int) -> LexicalModel | None:
        """The lexical half saved in model folder `folder`, or None when it has none. A damaged or mismatched pair of
        files raises one LongbertError line naming the file."""
        config_path, weights_path = folder / LEXICAL_CONFIG, folder / LEXICAL_WEIGHTS
        if not config_path.is_file():
            return None
        try:
            config = json.loads(config_path.read_text())
            mix, saved_vocab = float(config["mix"]), int(config["vocab_size"])
        except (ValueError, KeyError, TypeError) as error:
            raise LongbertError(f"{config_path} is damaged: {error!r}") from None
        if not 0 <= mix <= 1 or saved_vocab != vocab_size:
            raise LongbertError(f"{config_path} does not fit this model: mix {mix} (must be in [0, 1]), vocabulary "
                                f"{saved_vocab} (the backbone's is {vocab_size})")
        if not weights_path.is_file():
            raise LongbertError(f"{folder} is incomplete: no {LEXICAL_WEIGHTS} ({LEXICAL_CONFIG} is there)")
        try:
            t = load_file(weights_path)
            keys, idf, weight, bias = t["keys"], t["idf"], t["weight"], t["bias"]
        except (SafetensorError, KeyError) as error:
            raise LongbertError(f"{weights_path} is damaged: {error!r}") from None
        if not (keys.ndim == idf.ndim == 1 and weight.shape == (len(bias), len(keys)) and len(idf) == len(keys)):
            raise LongbertError(f"{weights_path} holds tensors of mismatched shapes: keys {tuple(keys.shape)}, "
                                f"idf {tuple(idf.shape)}, weight {tuple(weight.shape)}, bias {tuple(bias.shape)}")
        facts = {k: v for k, v in config.items() if k not in ("mix", "vocab_size")}
        return cls(keys, idf, weight, bias, saved_vocab, mix, facts)


# ------------------------------------------------------------------------------------------------------------
# Fitting


def fit_lexical(train: list[torch.Tensor], train_labels, validation: list[torch.Tensor], validation_labels,
                neural_validation: np.ndarray, n_classes: int, vocab_size: int) -> LexicalModel:
    """Fit TF-IDF + logistic regression on the training documents (token ids) and choose its C and the mix weight
    together on validation: the pair whose mixed validation probabilities have the smallest log loss (ties: the
    stronger regularisation, then the larger neural weight). `neural_validation` (D, C): the neural model's
    validation probabilities. scikit-learn is used for the fit only."""
    vectorizer, x_train, x_validation = _vectorize(train, validation, vocab_size)
    y_train, y_validation = np.asarray(train_labels), np.asarray(validation_labels)
    present = sorted(set(y_train.tolist()))
    if len(present) < 2:
        raise LongbertError(f"the TF-IDF half needs training documents of two classes or more; only class "
                            f"{present} has any")
    neural_validation = np.asarray(neural_validation, dtype=np.float64)
    (loss, c, _), model, mix, lexical = _best_c_and_mix(x_train, y_train, x_validation, y_validation,
                                                        neural_validation, n_classes)
    keys, columns, weight, bias = _buffers(vectorizer, model, n_classes)
    facts = {"features": "TF-IDF over token-id unigrams and bigrams (min_df=2, sublinear tf) + logistic regression",
             "n_features": int(len(keys)), "C": c, "chosen_by": "validation log loss of the mixed probabilities",
             "training_documents": len(train), "validation_documents": len(validation),
             "validation": _validation_facts(y_validation, neural_validation, lexical, mix, loss)}
    return LexicalModel(torch.from_numpy(keys), torch.from_numpy(vectorizer.idf_[columns]),
                        torch.from_numpy(weight), torch.from_numpy(bias), vocab_size, mix, facts)


def _vectorize(train: list[torch.Tensor], validation: list[torch.Tensor], vocab_size: int):
    """(a TfidfVectorizer fitted on the training documents' n-gram keys, the training and validation matrices)."""
    def keys_of(documents):
        return [ngram_keys(d, vocab_size).tolist() for d in documents]

    vectorizer = TfidfVectorizer(analyzer=lambda keys: keys, min_df=2, sublinear_tf=True)
    try:
        x_train = vectorizer.fit_transform(keys_of(train))
    except ValueError as error:  # no n-gram in two documents
        raise LongbertError(f"the TF-IDF half cannot be fitted on these training documents: {error}") from None
    return vectorizer, x_train, vectorizer.transform(keys_of(validation))


def _best_c_and_mix(x_train, y_train: np.ndarray, x_validation, y_validation: np.ndarray,
                    neural_validation: np.ndarray, n_classes: int):
    """Logistic regression fitted at each C of C_GRID, mixed at each weight of MIX_GRID: ((log loss, C, -mix), the
    fitted model, mix, its (D, C) validation probabilities) of the best pair (see `fit_lexical`)."""
    best = None
    for c in C_GRID:
        model = LogisticRegression(C=c, max_iter=2000).fit(x_train, y_train)
        lexical = np.zeros((len(y_validation), n_classes))
        lexical[:, model.classes_] = model.predict_proba(x_validation)
        for mix in MIX_GRID:
            mixed = mix * neural_validation + (1 - mix) * lexical
            loss = float(-np.log(np.clip(mixed[np.arange(len(y_validation)), y_validation], 1e-12, None)).mean())
            candidate = (loss, c, -mix)
            if best is None or candidate < best[0]:
                best = (candidate, model, mix, lexical)
    return best


def _buffers(vectorizer, model, n_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(the feature keys, sorted; each one's column in the vectorizer; weight (C, F); bias (C,)) of the fitted
    vectorizer and logistic regression, as LexicalModel holds them."""
    keys = np.fromiter(vectorizer.vocabulary_.keys(), dtype=np.int64)
    columns = np.fromiter(vectorizer.vocabulary_.values(), dtype=np.int64)
    order = np.argsort(keys)
    keys, columns = keys[order], columns[order]
    weight = np.zeros((n_classes, len(keys)))
    bias = np.zeros(n_classes)
    if len(model.classes_) == 2:  # scikit-learn keeps one row for two classes: p(second) = sigmoid(row)
        weight[model.classes_[1]] = model.coef_[0][columns]
        bias[model.classes_[1]] = model.intercept_[0]
    else:
        weight[model.classes_] = model.coef_[:, columns]
        bias[model.classes_] = model.intercept_
    absent = [k for k in range(n_classes) if k not in set(model.classes_.tolist())]
    bias[absent] = -1e4  # a class no training document has: scikit-learn gives it probability 0, and so does this
    return keys, columns, weight, bias


def _validation_facts(y_validation: np.ndarray, neural_validation: np.ndarray, lexical: np.ndarray, mix: float,
                      loss: float) -> dict:
    """How the neural, lexical and mixed validation probabilities fare: what lexical.json's `validation` says."""

    def accuracy(p):
        return float((p.argmax(1) == y_validation).mean())

    mixed = mix * neural_validation + (1 - mix) * lexical
    return {"neural_accuracy": accuracy(neural_validation), "lexical_accuracy": accuracy(lexical),
            "hybrid_accuracy": accuracy(mixed), "hybrid_log_loss": loss}
