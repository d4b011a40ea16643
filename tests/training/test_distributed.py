"""Several processes give what one gives: two CPU processes under torchrun (gloo), started as a subprocess the way a
user starts them, against one process in this one. Predictions: row for row, in input order, written once. Training:
two processes with batch B equal one process with batch B and twice the gradient accumulation, weights and metrics
alike, and only one process writes the run folder. Evaluation: the split divided between the processes gives the
metrics and predictions one process gives.

Each test starts torchrun once (about 15 s of CPU time, most of it importing torch and transformers in three
processes); `-m "not distributed"` leaves them out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import longbert
from helpers import build_model
from longbert.inference.predict import predict_file

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.distributed, pytest.mark.heavy]


def launch(*args: str, succeeds: bool = True) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node 2 -m longbert.cli ARGS`, from this checkout (its longbert is
    imported); it must exit 0, or with `succeeds=False` fail."""
    env = {**os.environ, "LONGBERT_PROGRESS": "0", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "longbert.cli", *map(str, args)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert (result.returncode == 0) == succeeds, result.stderr[-3000:]
    return result


def test_two_processes_predict_what_one_does(tiny_backbone_dir, tmp_path):
    model_dir = tmp_path / "model"
    build_model(tiny_backbone_dir, "chunk").save_pretrained(model_dir)
    # 150 documents of every length up to 3 windows, in batches of 1: two blocks, of 128 and 22 documents
    rows = [{"text": f"review {i}: " + "a fine film, " * ((i * 37) % 30), "key": f"k{i}", "n": i} for i in range(150)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    predict_file(model_dir, str(source), tmp_path / "one.jsonl", 1, id_column="key", keep=("n",), precision="fp32")
    one = [json.loads(line) for line in (tmp_path / "one.jsonl").read_text().splitlines()]

    result = launch("predict", model_dir, source, "--id-column", "key", "--keep", "n", "--batch-size", 1,
                    "--precision", "fp32")
    two = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["id"] for r in two] == [r["key"] for r in rows], "every row once, in input order, from one process"
    for a, b in zip(one, two):
        assert (a["id"], a["n"], a["label"], a["n_tokens"]) == (b["id"], b["n"], b["label"], b["n_tokens"])
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)


def test_two_processes_train_what_one_does_with_twice_the_accumulation(tiny_recipe, tmp_path):
    # 40 training documents in full batches of 4 (accelerate evens out a short last batch by repeating documents);
    # no dropout, whose random masks would differ between one process and two.
    overrides = [o for o in tiny_recipe if not o.startswith(("output_dir", "train.batch_size"))] + [
        "data.max_train_documents=40", "train.batch_size=4", "model.classifier_dropout=0", "train.log_every_steps=1",
        "train.warmup_ratio=0.2"]
    one = longbert.train(longbert.load_recipe(None, overrides + ["train.gradient_accumulation=2",
                                                                 f"output_dir={tmp_path / 'one'}"])).folder
    launch("train", *[x for o in overrides + [f"output_dir={tmp_path / 'two'}"] for x in ("--set", o)])
    two = tmp_path / "two"

    files = lambda run: sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    assert files(one) == files(two), "the same run folder, and nothing a second process left behind"
    for name in ("best/head.safetensors", "best/backbone/model.safetensors", "checkpoint/model.safetensors"):
        a, b = load_file(one / name), load_file(two / name)
        for key in a:
            torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4, msg=f"{name}: {key}")
    metrics = [json.loads((run / "metrics.json").read_text()) for run in (one, two)]
    assert metrics[0]["steps"] == metrics[1]["steps"] == 10
    for key in ("train_log", "validation_history"):
        for a, b in zip(metrics[0][key], metrics[1][key]):
            assert a.keys() == b.keys()
            for field in a:
                if field != "tokens_per_second":
                    assert a[field] == pytest.approx(b[field], abs=1e-5), (key, a["step"], field)
    # The test split, divided between the two processes and gathered back in order
    test = [{k: v for k, v in m["test"].items() if k != "speed"} for m in metrics]
    assert test[0]["confusion_matrix"] == test[1]["confusion_matrix"]
    assert test[0]["loss"] == pytest.approx(test[1]["loss"], abs=1e-5)
    assert_same_predictions(one / "predictions-test.jsonl", two / "predictions-test.jsonl")


@pytest.mark.slow  # a refusal, two process starts for one line; CI keeps the two runs that compare results
def test_two_processes_refuse_to_resume_a_run_that_one_process_trained(tiny_recipe, tmp_path):
    recipe = longbert.load_recipe(None, tiny_recipe + ["train.max_steps=1"])
    longbert.train(recipe)
    args = [x for o in tiny_recipe + ["train.max_steps=1"] for x in ("--set", o)]
    result = launch("train", "--resume", *args, succeeds=False)
    assert (f"error: --resume: the run in {recipe.output_dir} was trained by 1 process and this start has 2 "
            "processes") in result.stderr


def assert_same_predictions(a: Path, b: Path, tolerance: float = 1e-5) -> None:
    rows = [[json.loads(line) for line in path.read_text().splitlines()] for path in (a, b)]
    assert len(rows[0]) == len(rows[1])
    for x, y in zip(*rows):
        assert x.keys() == y.keys() and x["id"] == y["id"] and x["predicted"] == y["predicted"]
        assert x["probabilities"] == pytest.approx(y["probabilities"], abs=tolerance)


@pytest.mark.slow
def test_two_processes_evaluate_what_one_does(tiny_recipe, tmp_path):
    run = longbert.train(longbert.load_recipe(None, tiny_recipe + ["train.max_steps=2"])).folder
    one = longbert.evaluate(run, "validation", batch_size=1)
    (run / "predictions-validation.jsonl").rename(tmp_path / "one.jsonl")
    (run / "metrics-validation.json").unlink()
    launch("evaluate", run, "--split", "validation", "--batch-size", 1)
    two = json.loads((run / "metrics-validation.json").read_text())
    assert two["documents"] == one["documents"] and two["speed"]["processes"] == 2
    assert two["confusion_matrix"] == one["confusion_matrix"]
    assert two["loss"] == pytest.approx(one["loss"], abs=1e-3)  # bf16 where the CPU runs it fast
    assert_same_predictions(tmp_path / "one.jsonl", run / "predictions-validation.jsonl", tolerance=1e-3)
