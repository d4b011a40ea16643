"""The Trainer is the run: `longbert.train(...)` is `Trainer(...).train()`, documents and a model in memory go in, and
the kept model comes back in memory, predicting as its saved folder does."""

from __future__ import annotations

import pytest

import longbert

pytestmark = pytest.mark.heavy


def test_a_trainer_given_documents_in_memory_trains_and_returns_the_model_it_kept(tiny_recipe, imdb_slice):
    import datasets

    rows = datasets.load_dataset("json", data_files=str(imdb_slice / "train.jsonl"), split="train")
    overrides = [o for o in tiny_recipe if not o.startswith("data.path=")] + ["train.head_first=true",
                                                                             "train.frozen_head_epochs=1"]
    recipe = longbert.load_recipe(None, overrides)
    trainer = longbert.Trainer(recipe, train_dataset=rows.select(range(40)),
                               eval_dataset=rows.select(range(40, 60)))
    result = trainer.train()
    assert trainer.inputs.corpus.stats["train"]["documents"] == 40 and "test" not in result.metrics
    assert result.metrics["head_stage"]["steps"] == 5, "one epoch of 40 documents in batches of 8"
    texts = rows.select(range(40, 44))["text"]
    saved = longbert.LongDocumentClassifier.from_pretrained(result.model)
    assert result.classifier.predict(texts) == saved.predict(texts)
    again = longbert.Trainer(recipe, model=result.classifier, train_dataset=rows.select(range(40)))
    with pytest.raises(longbert.LongbertError, match="already holds a run"):
        again.train()  # the recipe's output_dir holds the first run: nothing is overwritten
