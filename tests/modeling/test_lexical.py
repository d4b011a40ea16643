"""The TF-IDF half of a hybrid model: its features and probabilities are scikit-learn's, computed from torch
buffers; its weight is chosen on validation; it survives a save and load, and a damaged file is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from longbert.errors import LongbertError
from longbert.modeling.lexical import LexicalModel, fit_lexical, ngram_keys
from longbert.utils.folders import LEXICAL_CONFIG

VOCAB = 40


def documents(n: int, seed: int, classes: int):
    """n random token-id documents whose class shows in which ids they use most."""
    g = torch.Generator().manual_seed(seed)
    docs, labels = [], []
    for i in range(n):
        label = i % classes
        ids = torch.randint(0, VOCAB, (int(torch.randint(4, 30, (1,), generator=g)),), generator=g)
        ids[: len(ids) // 2] = (ids[: len(ids) // 2] % 10) + 10 * label  # half the ids from the class's own range
        docs.append(ids)
        labels.append(label)
    return docs, labels


@pytest.mark.parametrize("classes", [2, 3])
def test_features_and_probabilities_equal_scikit_learns(classes):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    train, y = documents(90, 0, classes)
    test, _ = documents(30, 1, classes)
    model = fit_lexical(train, y, test[:10], [0] * 10, np.full((10, classes), 1 / classes), classes, VOCAB)
    keys = [ngram_keys(d, VOCAB).tolist() for d in train]
    vectorizer = TfidfVectorizer(analyzer=lambda k: k, min_df=2, sublinear_tf=True)
    x = vectorizer.fit_transform(keys)
    reference = LogisticRegression(C=model.facts["C"], max_iter=2000).fit(x, y)
    x_test = vectorizer.transform([ngram_keys(d, VOCAB).tolist() for d in test])
    for row, document in enumerate(test):
        indices, values = model.features(document)
        dense = np.zeros(len(model.keys))
        dense[indices.numpy()] = values.numpy()
        expected = np.zeros(len(model.keys))
        order = {int(k): i for i, k in enumerate(model.keys)}
        for column, value in zip(x_test[row].indices, x_test[row].data):
            expected[order[vectorizer.get_feature_names_out()[column]]] = value
        np.testing.assert_allclose(dense, expected, atol=1e-6)
    np.testing.assert_allclose(model.probabilities(test).numpy(), reference.predict_proba(x_test), atol=1e-5)


def test_the_weight_follows_the_better_half_on_validation():
    train, y = documents(90, 0, 2)
    validation, y_validation = documents(40, 2, 2)
    right = np.eye(2)[y_validation] * 0.98 + 0.01  # a neural half that is always right and confident
    wrong = right[:, ::-1]  # and one that is always wrong
    assert fit_lexical(train, y, validation, y_validation, right, 2, VOCAB).mix == 1.0
    assert fit_lexical(train, y, validation, y_validation, wrong, 2, VOCAB).mix == 0.0


def test_fuse_mixes_probabilities_at_the_weight():
    train, y = documents(60, 0, 2)
    model = fit_lexical(train, y, train[:8], y[:8], np.full((8, 2), 0.5), 2, VOCAB)
    neural = torch.tensor([[2.0, -1.0], [0.0, 3.0]])
    lexical = model.probabilities(train[:2])
    for mix in (0.0, 0.3, 1.0):
        model.mix = mix
        fused = model.fuse(neural, train[:2]).softmax(-1)
        torch.testing.assert_close(fused, mix * neural.softmax(-1) + (1 - mix) * lexical)


def test_save_and_load_give_the_same_model(tmp_path):
    train, y = documents(60, 0, 3)
    model = fit_lexical(train, y, train[:9], y[:9], np.full((9, 3), 1 / 3), 3, VOCAB)
    model.save(tmp_path)
    loaded = LexicalModel.load(tmp_path, VOCAB)
    assert loaded.mix == model.mix and loaded.facts == json.loads(json.dumps(model.facts))
    torch.testing.assert_close(loaded.probabilities(train[:5]), model.probabilities(train[:5]))
    assert LexicalModel.load(tmp_path / "missing", VOCAB) is None  # a plain model's folder has none


def test_a_damaged_or_mismatched_lexical_file_is_one_line(tmp_path):
    train, y = documents(60, 0, 2)
    fit_lexical(train, y, train[:8], y[:8], np.full((8, 2), 0.5), 2, VOCAB).save(tmp_path)
    with pytest.raises(LongbertError, match=r"does not fit this model: .*vocabulary 40 \(the backbone's is 41\)"):
        LexicalModel.load(tmp_path, VOCAB + 1)
    (tmp_path / "lexical.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(LongbertError, match=r"lexical.safetensors is damaged"):
        LexicalModel.load(tmp_path, VOCAB)
    (tmp_path / "lexical.safetensors").unlink()
    with pytest.raises(LongbertError, match=r"is incomplete: no lexical.safetensors"):
        LexicalModel.load(tmp_path, VOCAB)
    (tmp_path / LEXICAL_CONFIG).write_text("{")
    with pytest.raises(LongbertError, match=r"lexical.json is damaged"):
        LexicalModel.load(tmp_path, VOCAB)


def test_one_class_of_training_documents_is_refused():
    train, _ = documents(20, 0, 2)
    with pytest.raises(LongbertError, match="needs training documents of two classes or more"):
        fit_lexical(train, [1] * 20, train[:4], [1] * 4, np.full((4, 2), 0.5), 2, VOCAB)
