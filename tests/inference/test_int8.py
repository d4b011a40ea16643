"""int8 inference (longbert.modeling.int8): the backbone's Linear layers dynamically quantized on a copy (LoRA merged
first), everything else fp32, wrapped with the model itself, which re-reads the close calls; the model is left as it
was; the wrapper is made once; a GPU model is refused in one line."""

from __future__ import annotations

import pytest
import torch

import longbert
from helpers import build_model
from longbert.errors import LongbertError
from longbert.evaluation.evaluate import evaluate
from longbert.inference.serve import build_app, load_predictor
from longbert.modeling.card import TrainingFacts
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.int8 import DEFAULT_RECHECK_GAP, close_calls
from longbert.utils import hardware

TEXTS = ["a film " * 40 + "that I loved", "the worst " * 90 + "ever made", "fine"]


@pytest.mark.parametrize("strategy, extra", [("chunk", ()), ("truncate", ()), ("bigbird", ()),
                                             ("recurrence", ()), ("chunk", ("model.finetune=lora",))],
                         ids=["chunk", "truncate", "bigbird", "recurrence", "chunk-lora"])
def test_int8_predicts_close_to_fp32_and_leaves_the_model_as_it_was(tiny_backbone_dir, strategy, extra):
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    model = build_model(tiny_backbone_dir, strategy, extra)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    exact = model.predict(TEXTS, precision="fp32")
    quick = model.predict(TEXTS, precision="int8")
    for a, b in zip(exact, quick):
        assert a["n_tokens"] == b["n_tokens"]
        assert max(abs(a["probabilities"][k] - b["probabilities"][k]) for k in a["probabilities"]) < 0.05
    copied = model.for_precision("int8")
    assert copied is model.for_precision("int8") and model.for_precision("fp32") is model
    assert copied.exact is model and not any(p is q for p in copied.parameters() for q in model.parameters())
    # the wrapper is a model of its own: its predict runs int8 whatever precision it is asked for (bf16 autocast
    # cannot feed its quantized layers), and gives what predict(precision="int8") gives
    assert copied.for_precision("int8") is copied
    for asked in ("auto", "bf16", "int8"):
        assert copied.predict(TEXTS, precision=asked) == quick
    assert torch.equal(copied.embed(TEXTS, precision="bf16"), model.embed(TEXTS, precision="int8"))
    # its quantized copy is a plain classifier: nothing of int8 planted in it
    assert type(copied.quantized) is type(model)
    assert not any("int8" in name or "exact" in name for name in vars(copied.quantized))
    quantized = [m for m in copied.quantized.backbone.modules() if isinstance(m, DynamicLinear)]
    assert quantized and not any(isinstance(m, torch.nn.Linear) for m in copied.quantized.backbone.modules())
    # one scale per output channel (torch's default for a bare {nn.Linear} is one per matrix)
    assert {m.weight().qscheme() for m in quantized} == {torch.per_channel_affine}
    assert not any(isinstance(m, DynamicLinear) for m in model.modules())  # the model itself is untouched
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert "_int8_model" not in dict(model.named_modules())


def test_int8_is_refused_on_a_gpu_in_one_line(tiny_backbone_dir, monkeypatch):
    model = build_model(tiny_backbone_dir, "chunk")
    fake = torch.nn.Parameter(torch.zeros(1, device="meta"))
    monkeypatch.setattr(type(model), "parameters", lambda self, recurse=True: iter([fake]))
    with pytest.raises(LongbertError, match="precision int8 runs on the CPU only"):
        hardware.autocast_for(model, "int8")


def test_int8_without_torchs_dynamic_quantization_is_one_line_and_fp32_still_reads(tiny_backbone_dir, monkeypatch):
    """torch deprecates torch.ao.quantization; a torch without it refuses int8 in one line, and only int8."""
    import sys

    model = build_model(tiny_backbone_dir, "chunk")
    monkeypatch.setitem(sys.modules, "torch.ao.quantization", None)  # what importing a removed module does
    with pytest.raises(LongbertError, match=r"precision int8 needs torch\.ao\.quantization\.quantize_dynamic, which "
                                            r"torch .* does not have .*use precision fp32 or bf16") as caught:
        model.predict(TEXTS, precision="int8")
    assert "\n" not in str(caught.value)
    assert model.__dict__.get("_int8_model") is None  # nothing half-made is kept
    assert len(model.predict(TEXTS, precision="fp32")) == len(TEXTS)


@pytest.fixture
def saved(tiny_backbone_dir, tmp_path):
    folder = tmp_path / "saved"
    build_model(tiny_backbone_dir, "chunk").save_pretrained(folder)
    return folder


def test_the_pipeline_serve_and_predict_take_int8_and_give_what_the_model_gives(saved):
    from fastapi.testclient import TestClient
    from transformers import pipeline

    model = LongDocumentClassifier.from_pretrained(saved)
    expected = model.predict(TEXTS, precision="int8")
    # Dynamic quantization scales activations per batch, so int8 rows depend slightly on what shares their batch: the
    # pipeline runs one text at a time, as predict with batch_size=1 does.
    one_by_one = model.predict(TEXTS, batch_size=1, precision="int8")
    # int8 runs on the CPU only: on a machine with a GPU, where the pipeline would put the model, say so.
    classify = pipeline("text-classification", model=str(saved), top_k=None, model_kwargs={"precision": "int8"},
                        device="cpu")
    for row, scores in zip(one_by_one, classify(TEXTS)):
        assert {s["label"]: pytest.approx(s["score"], abs=1e-5) for s in scores} == row["probabilities"]
    predictor, backend = load_predictor(saved, "int8")
    assert backend == "pytorch-int8" and predictor.__dict__.get("_int8_model") is not None  # quantized at startup
    with TestClient(build_app(predictor, backend=backend, precision="int8")) as client:
        assert client.get("/health").json()["backend"] == "pytorch-int8"
        answer = client.post("/predict", json={"texts": TEXTS}).json()["predictions"]
    # pytest.approx takes no nested structures (pytest >= 9.2 refuses them): one dict of probabilities a row.
    assert len(answer) == len(expected)
    for served, row in zip(answer, expected):
        assert served["probabilities"] == pytest.approx(row["probabilities"], abs=1e-6)


def test_bad_precisions_are_one_line(saved):
    from transformers import AutoModelForSequenceClassification

    with pytest.raises(LongbertError, match="precision must be one of auto, fp32, bf16, int8, got 'int4'"):
        load_predictor(saved, "int4")
    with pytest.raises(LongbertError, match="precision must be one of"):
        AutoModelForSequenceClassification.from_pretrained(saved, precision="fp8")


def test_evaluate_at_int8_records_it_and_agrees_with_fp32(tiny_recipe):
    result = longbert.train(longbert.load_recipe(None, tiny_recipe + ["train.epochs=1"]))
    exact = evaluate(result.folder, "test", precision="fp32")
    quick = evaluate(result.folder, "test", precision="int8")
    assert (exact["precision"], quick["precision"]) == ("fp32", "int8")
    assert quick["documents"] == exact["documents"] and abs(quick["accuracy"] - exact["accuracy"]) <= 0.1
    with pytest.raises(LongbertError, match="--precision must be one of"):
        evaluate(result.folder, "test", precision="half")


def test_close_calls_are_the_two_likeliest_classes_near_each_other_or_a_label_near_its_threshold():
    single = torch.tensor([[0.55, 0.3, 0.15], [0.9, 0.05, 0.05], [0.2, 0.35, 0.45], [0.6, 0.25, 0.15]])
    # the two likeliest apart: 0.25, 0.85, 0.10, 0.35
    assert close_calls(single, False, [], 0.2).tolist() == [False, False, True, False]
    assert not close_calls(single, False, [], 0.0).any()  # gap 0: nothing is read again
    multi = torch.tensor([[0.95, 0.05], [0.58, 0.0], [0.35, 0.9]])
    # Within gap / 2 of its own threshold: 0.58 is 0.08 from 0.5, 0.35 is 0.05 from 0.3.
    assert close_calls(multi, True, [0.5, 0.5], 0.2).tolist() == [False, True, False]
    assert close_calls(multi, True, [0.3, 0.5], 0.2).tolist() == [False, False, True]  # 0.58 is 0.28 from 0.3


def test_int8_reads_its_close_calls_again_in_fp32_and_only_those(tiny_backbone_dir):
    from helpers import random_documents

    model = build_model(tiny_backbone_dir, "chunk")
    documents = random_documents([30, 700, 5, 200, 90, 1200, 60, 400], seed=1)
    with torch.no_grad():
        exact = model(documents).logits
        plain = model.for_precision("int8", recheck_gap=0.0)(documents).logits
        every = model.for_precision("int8", recheck_gap=1.0)(documents).logits  # every document is a close call
        assert not torch.allclose(plain, exact, atol=1e-6)  # quantization moves the logits
        assert torch.allclose(every, exact, atol=1e-5)
        p = plain.softmax(-1)
        gaps = (p[:, 0] - p[:, 1]).abs()
        middle = float(gaps.median())
        some = model.for_precision("int8", recheck_gap=middle)(documents).logits
    close = gaps < middle
    assert 0 < close.sum() < len(documents)
    assert torch.allclose(some[close], exact[close], atol=1e-5)
    assert torch.equal(some[~close], plain[~close])


def test_int8_takes_its_recheck_gap_from_the_quantize_measurement(saved):
    model = LongDocumentClassifier.from_pretrained(saved)
    assert model.for_precision("int8").recheck_gap == DEFAULT_RECHECK_GAP == 0  # never measured
    measured = LongDocumentClassifier.from_pretrained(saved)
    measured.training_facts = TrainingFacts(recipe="tiny", int8={"recheck_gap": 0.05})
    assert measured.for_precision("int8").recheck_gap == 0.05
