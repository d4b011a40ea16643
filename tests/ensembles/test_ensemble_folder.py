"""`longbert ensemble RUN RUN ... --output DIR`: several runs as one model folder. What the saved folder computes is
the mean of its members' probabilities, through every path that loads a model (evaluate, predict, the transformers
model, int8, explain); the members are chosen on validation; paths that cannot carry an ensemble say so in one line;
bad input is one line and deletes nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from longbert.cli import app

runner = CliRunner()


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def texts_path(tiny_recipe):
    return next(o.split("=", 1)[1] for o in tiny_recipe if o.startswith("data.path=")) + "/test.jsonl"


def texts_of(tiny_recipe, n):
    return [json.loads(line)["text"] for line in open(texts_path(tiny_recipe))][:n]


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory, tiny_backbone_dir, imdb_slice):
    """Three tiny runs on the same data: chunk, truncate, and chunk with another seed."""
    import longbert

    root = tmp_path_factory.mktemp("runs")
    base = [f"backbone.name={tiny_backbone_dir}", f"data.path={imdb_slice}", "data.label_names=[neg, pos]",
            "data.validation_fraction=0.25", "data.max_document_tokens=400", "train.epochs=1", "train.batch_size=8",
            "train.learning_rate=1e-3", "train.mixed_precision=no", "eval.batch_size=16", "data.seed=1",
            "model.calibration=temperature"]  # 15 validation documents: auto would fit none (AUTO_DOCUMENTS)
    runs = {}
    for name, extra in {"chunk": ["strategy.name=chunk", "strategy.window=62"],
                        "truncate": ["strategy.name=truncate", "strategy.max_tokens=126", "strategy.head_tokens=32"],
                        "chunk7": ["strategy.name=chunk", "strategy.window=62", "seed=7"]}.items():
        recipe = longbert.load_recipe(None, base + extra + [f"output_dir={root / name}"])
        runs[name] = longbert.train(recipe).folder
    return runs


@pytest.mark.heavy
def test_the_ensemble_folder_computes_the_mean_of_its_members(three_runs, tiny_recipe, tmp_path):
    import longbert
    from longbert.evaluation.evaluate import evaluate

    out = tmp_path / "ensemble"
    answer = runner.invoke(app, ["ensemble", *map(str, three_runs.values()), "--output", str(out)])
    assert answer.exit_code == 0, answer.output
    summary = json.loads((out / "ensemble-summary.json").read_text())
    members = list(summary["members"])
    assert 2 <= len(members) <= 3 and "among 4 groups of 2 or more of 3 runs" in summary["chosen_by"]
    # chosen on validation as compare chooses: the best-scoring group among the four
    from longbert.ensembles.choice import choose_members, read_validation

    validation = {name: read_validation(run) for name, run in three_runs.items()}
    assert list(choose_members(validation, summary["metric"])[0]) == members
    # evaluate the saved folder: before its calibration, its probabilities are the mean of its members' before
    # theirs (each evaluated from its own folder); after, that mean calibrated as fitted on validation
    from longbert.modeling.calibration import Calibration

    calibration = Calibration.from_dict(summary["calibration"])
    assert calibration.method == "temperature" and calibration.documents == 15  # the tiny runs are over-confident
    evaluate(out, "test", precision="fp32")
    got = rows(out / "predictions-test.jsonl")
    each = []
    for name in members:
        evaluate(three_runs[name], "test", precision="fp32")
        each.append([r.get("uncalibrated", r["probabilities"])
                     for r in rows(three_runs[name] / "predictions-test.jsonl")])
    np.testing.assert_allclose([r["uncalibrated"] for r in got], np.mean(each, axis=0), atol=2e-5)
    np.testing.assert_allclose([r["probabilities"] for r in got], calibration.apply(np.mean(each, axis=0)), atol=2e-5)
    # predict from texts and the transformers model give the same, and the mean of the members' predict (each
    # without its own calibration) calibrated as the ensemble is
    model = longbert.LongDocumentClassifier.from_pretrained(out)
    assert model.ensemble is not None and model.ensemble.facts.members == members
    assert model.settings.temperatures == calibration.temperatures
    texts = texts_of(tiny_recipe, 5)
    predicted = np.array([list(r["probabilities"].values()) for r in model.predict(texts, precision="fp32")])
    alone = [longbert.LongDocumentClassifier.from_pretrained(three_runs[m]).without_calibration().predict(
        texts, precision="fp32") for m in members]
    mean = np.mean([[list(r["probabilities"].values()) for r in a] for a in alone], axis=0)
    np.testing.assert_allclose(predicted, calibration.apply(mean), atol=1e-5)
    hf = longbert.LongbertForSequenceClassification.from_pretrained(out, precision="fp32")
    encoded = model.tokenizer(texts, padding=True, truncation=True, max_length=402, return_tensors="pt")
    with torch.no_grad():
        np.testing.assert_allclose(hf(**encoded).logits.softmax(-1).numpy(), predicted, atol=1e-5)
    # int8 quantizes every member, and the labels stay close to fp32's
    int8 = model.for_precision("int8").quantized
    for member in int8.ensemble.members(int8):
        assert "quantized" in type(member.backbone.encoder.layer[0].attention.self.query).__module__
    assert len(model.predict(texts, precision="int8")) == len(texts)
    # explain names the member it shows
    from longbert.inference.explain import explain

    explained, _ = explain(model, texts[:2], precision="fp32")
    assert all(r["member"] in members and r["decisive"] is not None for r in explained)
    card = (out / "best" / "README.md").read_text()
    assert "**Ensemble.**" in card and all(m in card for m in members) and "## First member" in card
    assert f"# longbert ensemble of {' + '.join(members)}" in card
    # its results are the ensemble's: validation of the members' mean, not the first member's kept step
    from longbert.modeling.card import format_metric

    line = next(text for text in card.splitlines() if text.startswith("Validation, "))
    metric = summary["metric"]
    assert line.startswith("Validation, of the members' mean probabilities: accuracy ") and "kept step" not in card
    assert f"{metric} {format_metric(metric, summary['validation']['ensemble'])}" in line
    # the data are the first member's, and the card says so (the command too: tests/modeling/test_card.py)
    assert "## Training data (the first member's)" in card and "## Training command" not in card
    # paths that carry one model say so in one line, and write nothing
    answer = runner.invoke(app, ["export", str(out), "--output", str(tmp_path / "onnx")])
    assert answer.exit_code == 2 and "ONNX export carries one model" in answer.output
    assert not (tmp_path / "onnx").exists()
    (tmp_path / "in.txt").write_text(texts[0] + "\n")
    answer = runner.invoke(app, ["embed", str(out), str(tmp_path / "in.txt"), "-o", str(tmp_path / "v.npy")])
    assert answer.exit_code == 2 and "one document vector per member" in answer.output
    assert not (tmp_path / "v.npy").exists()


@pytest.mark.heavy
def test_a_hybrid_of_an_ensemble_mixes_tfidf_into_the_members_mean(three_runs, tiny_recipe, tmp_path):
    import longbert
    from longbert.ensembles.hybrid import mix_probabilities
    from longbert.evaluation.evaluate import evaluate

    ensemble = tmp_path / "ensemble"
    answer = runner.invoke(app, ["ensemble", str(three_runs["chunk"]), str(three_runs["truncate"]), "--output",
                                 str(ensemble)])
    assert answer.exit_code == 0, answer.output
    answer = runner.invoke(app, ["hybrid", str(ensemble)])
    assert answer.exit_code == 0, answer.output
    folder = ensemble / "hybrid"
    summary = json.loads((folder / "hybrid.json").read_text())
    recorded = np.array([r["probabilities"] for r in rows(folder / "predictions-test.jsonl")])
    model = longbert.LongDocumentClassifier.from_pretrained(folder)
    # The TF-IDF half is the ensemble's, mixed into its members' mean; no member is a hybrid.
    assert model.ensemble is not None and model.ensemble.lexical is not None and model.lexical is None
    assert model.ensemble.lexical.mix == summary["mix"] and (folder / "best" / "ensemble_lexical").is_dir()
    assert all(m.lexical is None for m in model.ensemble.members(model))
    # Run from its folder, the hybrid gives the ensemble's own probabilities (run from its folder) mixed with TF-IDF's.
    # Both before calibration, and the hybrid's own calibration (fitted on validation) over the mix.
    from longbert.modeling.calibration import Calibration

    evaluate(ensemble, "test", precision="fp32")
    neural = np.array([r.get("uncalibrated", r["probabilities"]) for r in rows(ensemble / "predictions-test.jsonl")])
    evaluate(folder, "test", precision="fp32")
    got = np.array([r["probabilities"] for r in rows(folder / "predictions-test.jsonl")])
    texts = [json.loads(line)["text"] for line in open(texts_path(tiny_recipe))]
    documents = [torch.as_tensor(d) for d in model.tokenize(texts)[0]]
    calibration = Calibration.from_dict(summary["calibration"])
    np.testing.assert_allclose(got, calibration.apply(mix_probabilities(model.ensemble.lexical, neural, documents)),
                               atol=2e-5)
    np.testing.assert_allclose(got, recorded, atol=5e-3)  # the rows `hybrid` wrote mixed the members' kept rows
    if summary["mix"] < 1:
        assert not np.allclose(got, neural, atol=1e-3)
    # predict from texts and the transformers model give the same
    predicted = np.array([list(r["probabilities"].values()) for r in model.predict(texts[:5], precision="fp32")])
    np.testing.assert_allclose(predicted, got[:5], atol=1e-4)
    hf = longbert.LongbertForSequenceClassification.from_pretrained(folder, precision="fp32")
    encoded = model.tokenizer(texts[:5], padding=True, truncation=True, max_length=402, return_tensors="pt")
    with torch.no_grad():
        np.testing.assert_allclose(hf(**encoded).logits.softmax(-1).numpy(), predicted, atol=1e-5)
    card = (folder / "best" / "README.md").read_text()
    assert "# longbert hybrid ensemble of chunk + truncate" in card
    assert f"**Hybrid.** The output mixes the ensemble's mean probabilities (weight {summary['mix']:.2f})" in card
    # A hybrid ensemble is not mixed again, and an ensemble with a hybrid member is not made a hybrid: one line each.
    answer = runner.invoke(app, ["hybrid", str(folder), "--output", str(tmp_path / "again")])
    assert answer.exit_code == 2 and "is a hybrid ensemble already" in answer.output
    assert not (tmp_path / "again").exists()
    answer = runner.invoke(app, ["ensemble", str(folder), str(three_runs["chunk7"]), "--output",
                                 str(tmp_path / "nested")])
    assert answer.exit_code == 2 and "is an ensemble already" in answer.output
    hybrid_member = tmp_path / "hybrid_chunk"
    assert runner.invoke(app, ["hybrid", str(three_runs["chunk"]), "--output", str(hybrid_member)]).exit_code == 0
    mixed = tmp_path / "mixed"
    answer = runner.invoke(app, ["ensemble", str(hybrid_member), str(three_runs["truncate"]), "--output", str(mixed)])
    assert answer.exit_code == 0, answer.output
    answer = runner.invoke(app, ["hybrid", str(mixed), "--output", str(tmp_path / "h")])
    assert answer.exit_code == 2 and "is a hybrid already: make the ensemble of plain runs" in answer.output
    assert not (tmp_path / "h").exists()
    # A hybrid ensemble whose TF-IDF half lost its files is one line on loading, not a plain ensemble.
    import shutil

    from longbert.errors import LongbertError

    damaged = tmp_path / "damaged"
    shutil.copytree(folder / "best", damaged)
    (damaged / "ensemble_lexical" / "lexical.json").unlink()
    with pytest.raises(LongbertError, match="ensemble_lexical is incomplete: it holds no TF-IDF half"):
        longbert.LongDocumentClassifier.from_pretrained(damaged)


@pytest.mark.heavy
@pytest.mark.parametrize("ensemble_score", [1.5, -1.0])
def test_compares_hybrid_mixes_into_the_ensemble_only_when_it_beats_every_run_on_validation(three_runs, tmp_path,
                                                                                            ensemble_score):
    """build_hybrid's choice of base: the ensemble row's validation score (here set above any score, or below) against
    the best strategy's; the ensemble's hybrid goes beside the runs, a strategy's into its run folder."""
    import longbert
    from longbert.comparison.combined import build_hybrid

    runs = {name: three_runs[name] for name in ("chunk", "truncate")}
    row = {"name": "ensemble", "members": ["chunk", "truncate"], "validation": ensemble_score,
           "chosen_by": "validation macro_f1", "groups_scored": 1}
    summary, rows, why = build_hybrid(runs, "macro_f1", False, lambda: None, row, tmp_path / "compare")
    assert why is None and len(rows) == 30
    model = longbert.LongDocumentClassifier.from_pretrained(summary["folder"])
    if ensemble_score > 1:
        assert summary["members"] == ["ensemble", "tfidf"] and summary["folder"] == str(tmp_path / "compare" / "hybrid")
        assert model.ensemble.facts.members == ["chunk", "truncate"] and model.ensemble.lexical is not None
        assert "compare: its ensemble row" in model.ensemble.facts.chosen_by
    else:
        assert summary["members"][0] in runs and not (tmp_path / "compare").exists()
        assert summary["folder"] == str(runs[summary["members"][0]] / "hybrid")
        assert model.ensemble is None and model.lexical is not None


@pytest.mark.heavy
def test_all_takes_every_run_and_an_earlier_ensemble_is_replaced(three_runs, tmp_path):
    out = tmp_path / "e"
    for _ in range(2):  # the second time over its own earlier output
        answer = runner.invoke(app, ["ensemble", *map(str, three_runs.values()), "--output", str(out), "--all"])
        assert answer.exit_code == 0, answer.output
    summary = json.loads((out / "ensemble-summary.json").read_text())
    assert list(summary["members"]) == list(three_runs) and summary["chosen_by"] == "all the runs given (--all)"
    from longbert.ensembles.ensemble_folder import make_ensemble

    result = make_ensemble(list(three_runs.values()), out, use_all=True)  # from Python: the folder as a Result
    assert result.folder == result.model == out
    assert json.loads(json.dumps(result.metrics)) == json.loads((out / "ensemble-summary.json").read_text()) == summary
    assert set(summary["validation"]) == {*three_runs, "ensemble"}


@pytest.mark.heavy
def test_members_that_share_their_last_path_parts_stay_apart_and_a_copy_of_one_model_is_refused(three_runs, tmp_path):
    """Two compares that share --name under two --runs-dir give runs A/x/run and B/x/run: each must stay itself (its
    name is for people, never its identity), and an ensemble of one model with its own copy is refused."""
    import shutil

    a, b = tmp_path / "A" / "x" / "run", tmp_path / "B" / "x" / "run"
    shutil.copytree(three_runs["chunk"], a)
    shutil.copytree(three_runs["chunk7"], b)
    out = tmp_path / "e"
    answer = runner.invoke(app, ["ensemble", str(a), str(b), "--output", str(out)])
    assert answer.exit_code == 0, answer.output
    summary = json.loads((out / "ensemble-summary.json").read_text())
    assert list(summary["members"]) == ["A/x/run", "B/x/run"]
    assert len(set(summary["fingerprints"].values())) == 2
    member_rows = [rows(run / "predictions-validation.jsonl") for run in (a, b)]
    mean = np.mean([[r.get("uncalibrated", r["probabilities"]) for r in m] for m in member_rows], axis=0)
    written = rows(out / "predictions-validation.jsonl")
    np.testing.assert_allclose([r.get("uncalibrated", r["probabilities"]) for r in written], mean,
                               atol=2e-6)  # both members, not one of them twice
    c = tmp_path / "C" / "x" / "run"
    shutil.copytree(three_runs["chunk"], c)
    answer = runner.invoke(app, ["ensemble", str(a), str(c), "--output", str(tmp_path / "same")])
    assert answer.exit_code == 2 and "holds the same model as" in answer.output and "A/x/run" in answer.output
    assert not (tmp_path / "same").exists()
    # The same network given another temperature is still the same network.
    config = c / "best" / "longbert_config.json"
    settings = json.loads(config.read_text())
    settings["temperatures"] = [1.7]
    config.write_text(json.dumps(settings))
    answer = runner.invoke(app, ["ensemble", str(a), str(c), "--output", str(tmp_path / "same")])
    assert answer.exit_code == 2 and "holds the same model as" in answer.output, answer.output
    assert not (tmp_path / "same").exists()


def _contents(folder):
    return sorted((str(p.relative_to(folder)), p.read_text() if p.is_file() else None) for p in folder.rglob("*"))


def _fake_run(path):
    (path / "best").mkdir(parents=True)
    (path / "recipe.yaml").write_text("x")
    (path / "best" / "weights").write_text("w")
    return path


def test_eight_runs_bound_a_choice_not_a_group_compare_chose(tmp_path):
    """`longbert ensemble` chooses among at most eight runs; compare's seed rows and its ensemble over many seeds
    come chosen already (chosen_by), so nine members are written, not refused."""
    from longbert.ensembles.ensemble_folder import check_runs
    from longbert.errors import LongbertError

    runs = [_fake_run(tmp_path / "runs" / str(i)) for i in range(9)]
    with pytest.raises(LongbertError, match="an ensemble takes 2 to 8 runs, got 9"):
        check_runs(runs, tmp_path / "out")
    check_runs(runs, tmp_path / "out", None)
    with pytest.raises(LongbertError, match="an ensemble takes 2 runs or more, got 1"):
        check_runs(runs[:1], tmp_path / "out", None)
    answer = runner.invoke(app, ["ensemble", *map(str, runs), "--output", str(tmp_path / "out")])
    assert answer.exit_code == 2 and "an ensemble takes 2 to 8 runs, got 9" in answer.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case, message", [
    ("one", "an ensemble takes 2 to 8 runs, got 1"),
    ("twice", "is named twice"),
    ("unfinished", "is not a finished longbert run folder"),
    ("into a run", "is the run folder"),
    ("holding a run", "is the run folder"),
    ("inside a run's model", "holds it or lies inside it"),  # r/best/sub: once written into a member's model folder
    ("other files", "already holds files this command did not write"),
    ("empty name", "--output"),
])
def test_bad_input_is_one_line_and_deletes_nothing(tmp_path, case, message):
    a, b = _fake_run(tmp_path / "runs" / "a"), _fake_run(tmp_path / "runs" / "b")
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    args = {"one": [a], "twice": [a, a], "unfinished": [a, tmp_path], "into a run": [a, b],
            "holding a run": [a, b], "inside a run's model": [a, b], "other files": [a, b], "empty name": [a, b]}[case]
    output = {"into a run": a, "holding a run": tmp_path / "runs", "inside a run's model": a / "best" / "sub",
              "other files": other, "empty name": ""}.get(case, tmp_path / "new")
    before = _contents(tmp_path)
    answer = runner.invoke(app, ["ensemble", *map(str, args), "--output", str(output)])
    assert answer.exit_code == 2, answer.output
    assert message in answer.output and len(answer.output.strip().splitlines()) == 1, answer.output
    assert _contents(tmp_path) == before


@pytest.mark.heavy
def test_a_run_without_validation_predictions_needs_all(three_runs, tmp_path):
    import shutil

    copy = tmp_path / "chunk"
    shutil.copytree(three_runs["chunk"], copy)
    (copy / "predictions-validation.jsonl").unlink()
    answer = runner.invoke(app, ["ensemble", str(copy), str(three_runs["truncate"]), str(three_runs["chunk7"]),
                                 "--output", str(tmp_path / "e")])
    assert answer.exit_code == 2 and "kept no validation predictions" in answer.output
    assert not (tmp_path / "e").exists()


def _rewrite_validation(run, right_first_half: bool):
    """Make a run's kept validation predictions confidently right on one half of the documents and narrowly wrong
    on the other, so that two runs with opposite halves average to right everywhere."""
    path = run / "predictions-validation.jsonl"
    kept = rows(path)
    half = len(kept) // 2
    for i, row in enumerate(kept):
        right = (i < half) == right_first_half
        p_label = 0.9 if right else 0.4
        probabilities = [1 - p_label, p_label] if row["label"] == 1 else [p_label, 1 - p_label]
        row.update(probabilities=probabilities, predicted=int(probabilities[1] > 0.5))
        row.pop("uncalibrated", None)  # what an ensemble averages, where a row has it: these rows stand as they are
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))


@pytest.mark.heavy
@pytest.mark.parametrize("row", ["ensemble", "seeds", "ensemble of a seed run"])
def test_compare_deploys_the_row_best_on_validation_as_a_folder(three_runs, tmp_path, row):
    import shutil

    import longbert
    from longbert.comparison.combined import deployable

    copies = {name: tmp_path / "cmp" / name for name in three_runs}
    for name, run in three_runs.items():
        shutil.copytree(run, copies[name])
    if row == "ensemble":
        _rewrite_validation(copies["chunk"], True)
        _rewrite_validation(copies["truncate"], False)
        runs = {"chunk": {"chunk": copies["chunk"]}, "truncate": {"truncate": copies["truncate"]}}
        combined = [{"name": "ensemble", "members": ["chunk", "truncate"], "chosen_by": "validation accuracy",
                     "groups_scored": 1}]
    elif row == "seeds":
        _rewrite_validation(copies["chunk"], True)
        _rewrite_validation(copies["chunk7"], False)
        runs = {"chunk": {"chunk": copies["chunk"], "chunk-seed7": copies["chunk7"]}}
        combined = [{"name": "chunk × 2 seeds", "strategy": "chunk", "members": ["seed 42", "seed 7"],
                     "seeds": [42, 7]}]
    else:  # compare --seeds: the ensemble's members are named as compare names runs, a seed's run among them
        _rewrite_validation(copies["chunk"], True)
        _rewrite_validation(copies["chunk7"], True)
        _rewrite_validation(copies["truncate"], False)
        runs = {"chunk": {"chunk": copies["chunk"], "chunk-seed7": copies["chunk7"]},
                "truncate": {"truncate": copies["truncate"]}}
        combined = [{"name": "ensemble", "members": ["chunk-seed7", "truncate"], "chosen_by": "validation accuracy",
                     "groups_scored": 3}]
    chosen = deployable(runs, combined, tmp_path / "cmp", "accuracy")
    name = combined[0]["name"]
    assert chosen["row"] == name and chosen["validation"][name] == 1.0 and chosen["validation"]["chunk"] < 0.6
    folder = tmp_path / "cmp" / ("chunk-seeds" if row == "seeds" else "ensemble")
    if row == "ensemble of a seed run":
        facts = json.loads((folder / "best" / "ensemble.json").read_text())
        assert facts["members"] == ["chunk7", "truncate"]  # the seed's run, found by the name compare gave it
    assert chosen["folder"] == str(folder)
    model = longbert.LongDocumentClassifier.from_pretrained(folder)
    assert model.ensemble is not None and len(model.ensemble.facts.members) == 2
    assert model.ensemble.facts.chosen_by.startswith("compare: ")
    assert all(r["predicted"] == r["label"] for r in rows(folder / "predictions-validation.jsonl"))


def test_members_whose_rows_are_other_documents_at_the_same_places_with_the_same_labels_are_refused():
    from longbert.ensembles.ensemble_folder import same_documents
    from longbert.errors import LongbertError
    from longbert.evaluation.predictions import PredictionRow

    def rows(lengths, ids=None):
        return [PredictionRow(i, n, i % 2, [0.5, 0.5], 0, id=None if ids is None else ids[i])
                for i, n in enumerate(lengths)]

    same_documents({"a": rows([300, 700, 90]), "b": rows([300, 700, 90])}, "test")  # the same documents: accepted
    for other in (rows([300, 701, 90]), rows([300, 700, 90], ["x", "y", "z"])):
        with pytest.raises(LongbertError, match="b's test predictions are not of the documents a's are"):
            same_documents({"a": rows([300, 700, 90]), "b": other}, "test")
