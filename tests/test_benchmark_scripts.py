"""The research scripts in benchmarks/scripts/ (the numbers in the docs come from them) compute what they say, and fail
in one line on bad input."""
import json
import subprocess
from pathlib import Path

import pytest

from helpers import run_script

SCRIPTS = Path(__file__).resolve().parent.parent / "benchmarks" / "scripts"


def write_run(folder: Path, rows: list[tuple[int, int, int]]) -> Path:
    """A run folder holding predictions-test.jsonl rows of (n_tokens, label, predicted)."""
    folder.mkdir(parents=True)
    lines = [json.dumps({"index": i, "n_tokens": n, "label": label, "predicted": predicted,
                          "probabilities": [0.5, 0.5]})
             for i, (n, label, predicted) in enumerate(rows)]
    (folder / "predictions-test.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def paired_runs(*args) -> subprocess.CompletedProcess:
    return run_script(SCRIPTS / "paired_runs.py", *map(str, args))


def test_paired_runs_counts_the_documents_only_one_run_got_right(tmp_path):
    # 10 long documents: A right on all, B wrong on 8 -> 8 discordant, all for A: exact p = 2 * 0.5**8
    a = write_run(tmp_path / "a", [(600, 1, 1)] * 10 + [(100, 0, 0)] * 4)
    b = write_run(tmp_path / "b", [(600, 1, 0)] * 8 + [(600, 1, 1)] * 2 + [(100, 0, 1)] * 4)
    result = paired_runs(a, b, "--json", tmp_path / "out.json")
    assert result.returncode == 0, result.stderr
    pairs = {p["documents"]: p for p in json.loads((tmp_path / "out.json").read_text())["pairs"]}
    assert (pairs["long"]["n"], pairs["long"]["only_a_right"], pairs["long"]["only_b_right"]) == (10, 8, 0)
    assert abs(pairs["long"]["p_value"] - 2 * 0.5 ** 8) < 1e-12
    assert (pairs["all"]["only_a_right"], pairs["all"]["only_b_right"]) == (12, 0)
    assert f"{a}: accuracy 1.0000 (n=14), over 512 tokens 1.0000 (n=10)" in result.stdout


def test_paired_runs_pairs_a_run_folder_with_committed_gzipped_predictions(tmp_path):
    import gzip

    a = write_run(tmp_path / "a", [(600, 1, 1)] * 3 + [(600, 1, 0)])
    b = write_run(tmp_path / "b", [(600, 1, 0)] * 3 + [(600, 1, 1)])
    packed = tmp_path / "b-test.jsonl.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as stream:
        stream.write((b / "predictions-test.jsonl").read_text())
    by_folder, by_file = paired_runs(a, b, "--json", tmp_path / "f.json"), paired_runs(a, packed, "--json",
                                                                                        tmp_path / "g.json")
    assert by_folder.returncode == by_file.returncode == 0, by_file.stderr
    pairs = lambda name: [{k: v for k, v in p.items() if k != "b"}
                          for p in json.loads((tmp_path / name).read_text())["pairs"]]
    assert pairs("f.json") == pairs("g.json") and pairs("g.json")[0]["only_a_right"] == 3
    missing = paired_runs(a, tmp_path / "none.jsonl.gz")
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1 and "none.jsonl.gz" in \
        missing.stderr


def test_paired_runs_refuses_runs_that_predicted_other_documents(tmp_path):
    a = write_run(tmp_path / "a", [(600, 1, 1), (100, 0, 0)])
    b = write_run(tmp_path / "b", [(600, 0, 1), (100, 0, 0)])
    result = paired_runs(a, b)
    assert result.returncode == 1 and result.stderr.strip() == f"error: {b} predicted other test documents than {a}"


def test_paired_runs_names_a_folder_without_predictions(tmp_path):
    a = write_run(tmp_path / "a", [(600, 1, 1)])
    result = paired_runs(a, tmp_path)
    assert result.returncode == 1 and str(tmp_path) in result.stderr and "predictions-test.jsonl" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_paired_runs_without_long_documents_says_so(tmp_path):
    a = write_run(tmp_path / "a", [(100, 1, 1), (100, 0, 0)])
    b = write_run(tmp_path / "b", [(100, 1, 0), (100, 0, 0)])
    result = paired_runs(a, b)
    assert result.returncode == 0, result.stderr
    assert f"{a}: accuracy 1.0000 (n=2), over 512 tokens n/a (n=0)" in result.stdout


def test_tfidf_baseline_writes_predictions_that_paired_runs_reads(tmp_path):
    words = {0: "dull boring awful waste", 1: "wonderful moving brilliant joy"}
    rows = [{"text": f"{words[i % 2]} film number {i}", "label": i % 2} for i in range(40)]
    for split, part in (("train", rows[:30]), ("test", rows[30:])):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"name: tiny\ndata:\n  path: {tmp_path}\n  validation_fraction: 0.2\n")
    out = tmp_path / "tfidf"
    result = run_script(SCRIPTS / "tfidf_baseline.py", str(recipe), "--predictions",
                             str(out))
    assert result.returncode == 0, result.stderr
    predictions = [json.loads(line) for line in (out / "predictions-test.jsonl").read_text().splitlines()]
    assert [p["label"] for p in predictions] == [r["label"] for r in rows[30:]]
    accuracy = json.loads((out / "metrics.json").read_text())["test"]["accuracy"]
    assert accuracy == sum(p["label"] == p["predicted"] for p in predictions) / 10
    assert paired_runs(out, out).returncode == 0

    missing = run_script(SCRIPTS / "tfidf_baseline.py", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 1 and "nope.yaml" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def test_write_documents_writes_what_the_recipe_draws_and_the_written_folder_draws_it_again(tmp_path):
    from longbert import load_recipe
    from longbert.data.documents import load_corpus
    from longbert.modeling.backbone import load_tokenizer

    words = {0: "dull boring awful waste", 1: "wonderful moving brilliant joy"}
    rows = [{"text": f"{words[i % 2]} film number {i} " + "more " * (i % 7), "label": ["neg", "pos"][i % 2],
             "id": f"doc-{i}"} for i in range(60)]
    data = tmp_path / "data"
    data.mkdir()
    for split, part in (("train", rows[:45]), ("test", rows[45:])):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"name: tiny\nseed: 7\ndata:\n  path: {data}\n  validation_fraction: 0.2\n"
                      "  max_train_documents: 20\n  max_test_documents: 8\n  test_longer_than: 12\n")
    out = tmp_path / "written"
    result = run_script(SCRIPTS / "write_documents.py", str(recipe), str(out))
    assert result.returncode == 0, result.stderr
    tokenizer = load_tokenizer("minilm")
    drawn = load_corpus(load_recipe(recipe).data, tokenizer, 7)
    again = load_corpus(load_recipe(recipe, [f"data.path={out}"]).data, tokenizer, 7)
    assert drawn.label_names == again.label_names == ["neg", "pos"]
    for role in ("train", "validation", "test"):
        for column in ("id", "text", "labels", "input_ids"):
            assert again.splits[role][column] == drawn.splits[role][column], (role, column)
    # The draw subsampled training and selected test documents by length, and the written folder kept just those.
    assert len(drawn.splits["train"]) == 20 and 0 < len(drawn.splits["test"]) < 15
    assert min(drawn.splits["test"]["n_tokens"]) > 12

    # An existing folder that holds anything is refused in one line, and left as it was.
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    refused = run_script(SCRIPTS / "write_documents.py", str(recipe), str(taken))
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1 and str(taken) in refused.stderr
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]
    bad = run_script(SCRIPTS / "write_documents.py", str(tmp_path / "nope.yaml"),
                          str(tmp_path / "new"))
    assert bad.returncode == 1 and "nope.yaml" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_embed_and_classify_fits_a_classifier_on_real_minilm_vectors(tmp_path):
    """The real backbone on real reviews (slow: MiniLM reads 40 long IMDb reviews): the vectors carry the sentiment
    well above chance, with C chosen on held-out training vectors."""
    done = run_script(SCRIPTS / "embed_and_classify.py", "--train", "20", "--test", "20",
                           "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["vector_size"] == 384 and result["test"] == 20 and 0.5 < result["test_accuracy"] <= 1.0


def test_check_ensemble_folder_names_a_folder_that_is_no_model_in_one_line(tmp_path):
    result = run_script(SCRIPTS / "check_ensemble_folder.py", str(tmp_path))
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        f"error: {tmp_path} is not a longbert model folder (no longbert_config.json)"]


def load_script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_majority_ceiling_counts_reviews_and_votes_as_its_formula_says(tmp_path):
    ceiling = load_script("majority_ceiling")
    documents = [{"label": 1, "review_labels": [1, 1, 0]}, {"label": 0, "review_labels": [1, 0, 0]},
                 {"label": 1, "review_labels": [0, 1, 1]}, {"label": 0, "review_labels": [0, 1, 0]}]
    predicted = [[1, 1, 0], [1, 1, 0], [1, 1, 1], [0, 0, 0]]  # 9 of 12 reviews right
    counted = ceiling.counted(documents, predicted)
    assert counted["review_accuracy"] == 0.75
    assert counted["majority_vote"] == 0.75  # the second document's vote is wrong
    assert counted["one_review"] == {"first": 0.75, "middle": 0.75, "last": 0.75}
    a = 0.75
    assert counted["formula"]["majority_vote"] == a * a + 2 * a * (1 - a) ** 2
    assert "mean_probability" not in counted  # no probabilities given
    # One confident review against two mild ones: the mean logit (11.5 - 1.39 - 1.39 > 0) follows the confident one,
    # the mean probability (0.47 < 0.5: bounded votes) the two.
    one = [{"label": 0, "review_labels": [1, 0, 0]}]
    averaged = ceiling.counted(one, [[1, 0, 0]], [[0.99999, 0.2, 0.2]])
    assert (averaged["mean_probability"], averaged["mean_logit"], averaged["majority_vote"]) == (1.0, 0.0, 1.0)
    words = " ".join(f"w{i}" for i in range(10))
    assert ceiling.reviews_of({"text": words, "review_starts": [0, 4, 8], "review_words": [2, 1, 2]}) == \
        ["w0 w1", "w4", "w8 w9"]


def test_majority_ceiling_and_unit_readouts_refuse_a_missing_or_wrong_file_in_one_line(tmp_path):
    def named(name, *args):
        return run_script(SCRIPTS / f"{name}.py", *map(str, args))

    depth = tmp_path / "depth.jsonl"
    depth.write_text(json.dumps({"id": "depth-0600-000001", "text": "a b", "label": 0}) + "\n")
    for result, fragment in (
            (named("majority_ceiling", tmp_path / "model", "--probe", tmp_path / "none.jsonl"), "none.jsonl"),
            (named("majority_ceiling", tmp_path / "model", "--probe", depth), "not a majority probe"),
            (named("unit_readouts", tmp_path / "model", "--validation", tmp_path / "none.jsonl", "--test",
                         depth), "none.jsonl is not a file")):
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr


def test_unit_readouts_read_the_units_four_ways():
    import torch

    readouts = load_script("unit_readouts")
    # Three units: two lean to class 1, one is sure of class 0; the pooler said class 0.
    logits = torch.tensor([[0.0, 0.5], [0.0, 0.4], [4.0, 0.0]])
    outputs = [{"probabilities": torch.tensor([0.6, 0.4]), "unit_logits": logits,
                "unit_probabilities": logits.softmax(-1)}]
    read = readouts.readings(outputs, threshold=0.9)
    assert read["model"] == [0]
    assert read["mean logit"] == [0]  # (4.0, 0.3) / 3
    assert read["soft vote"] == [0]
    assert read["sure vote"] == [0]  # only the third unit is sure
    assert readouts.readings(outputs, threshold=0.5)["sure vote"] == [1]  # every unit votes: two for class 1
    logits = torch.tensor([[0.0, 0.5], [0.0, 0.4], [0.2, 0.0]])
    outputs[0].update(unit_logits=logits, unit_probabilities=logits.softmax(-1))
    assert readouts.readings(outputs, threshold=0.5)["soft vote"] == [1]


def test_where_it_looks_weighs_the_units_that_hold_a_review():
    looks = load_script("where_it_looks")
    text = "n1 n2 r1 r2 n3 n4 m1 n5 n6 l1 l2"
    document = {"text": text, "review_starts": [2, 6, 9], "review_words": [2, 1, 2]}
    # One token a word, except m1, which is two tokens (m, ##1).
    offsets = [(0, 2), (3, 5), (6, 8), (9, 11), (12, 14), (15, 17), (18, 19), (19, 20), (21, 23), (24, 26),
               (27, 29), (30, 32)]
    reviews = looks.review_token_ranges(document, offsets)
    assert reviews == [(2, 4), (6, 8), (10, 12)]
    from longbert.strategies.windows import window_spans

    spans = window_spans(len(offsets), 4, 4)  # units: tokens 0-3, 4-7, 8-11
    looked = looks.looked_at([0.5, 0.25, 0.25], spans, reviews)
    assert looked["on reviews"] == 1.0 and looked["if even"] == 1.0 and looked["top unit"] == 1.0
    assert (looked["first"], looked["middle"], looked["last"]) == (0.5, 0.25, 0.25)
    spans = window_spans(len(offsets), 2, 2)  # six units; those at tokens 0-1, 4-5 and 8-9 hold no review
    looked = looks.looked_at([0.4, 0.1, 0.3, 0.1, 0.0, 0.1], spans, reviews)
    assert looked["if even"] == 0.5 and looked["top unit"] == 0.0
    assert abs(looked["on reviews"] - 0.3) < 1e-9 and abs(looked["middle"] - 0.1) < 1e-9


def test_where_it_looks_refuses_predictions_without_unit_weights_in_one_line(tmp_path):
    run = write_run(tmp_path / "run", [(600, 1, 1)])
    probe = tmp_path / "test.jsonl"
    probe.write_text(json.dumps({"id": "majority-npp-000000", "text": "a b c", "label": 1, "review_starts": [0, 1, 2],
                                 "review_words": [1, 1, 1]}) + "\n")
    for args, fragment in (((run / "predictions-test.jsonl", "--probe", tmp_path / "none.jsonl"), "none.jsonl"),
                           ((run / "predictions-test.jsonl", "--probe", probe), "no unit_weights")):
        result = run_script(SCRIPTS / "where_it_looks.py", *map(str, args))
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr


def write_probabilities(path: Path, probabilities, labels) -> Path:
    rows = [json.dumps({"index": i, "n_tokens": 100, "label": int(y), "predicted": int(p[1] > p[0]),
                        "probabilities": [round(float(x), 6) for x in p]})
            for i, (p, y) in enumerate(zip(probabilities, labels))]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_calibration_check_fits_on_validation_and_softens_an_over_confident_run(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    run = tmp_path / "run"
    run.mkdir()
    for split, n in (("validation", 600), ("test", 600)):
        z = rng.normal(0, 1.5, size=n)
        labels = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(int)
        p1 = 1 / (1 + np.exp(-3 * z))  # three times too sure
        write_probabilities(run / f"predictions-{split}.jsonl", np.stack([1 - p1, p1], 1), labels)
    result = run_script(SCRIPTS / "calibration_check.py", str(run), "--json",
                             str(tmp_path / "out.json"))
    assert result.returncode == 0, result.stderr
    row = json.loads((tmp_path / "out.json").read_text())[0]
    assert row["method"] == "temperature" and 2.2 < row["temperatures"][0] < 4.0
    assert row["after"]["ece"] < row["before"]["ece"] / 2 and row["predictions_unchanged"] is True


def test_calibration_check_refuses_an_unpaired_file_and_a_missing_one_in_one_line(tmp_path):
    script = SCRIPTS / "calibration_check.py"
    odd = run_script(script, "--pairs", str(tmp_path / "v.jsonl"))
    assert odd.returncode == 1 and "--pairs takes a validation file and a test file" in odd.stderr
    missing = run_script(script, str(tmp_path))
    assert missing.returncode == 1 and "predictions-validation.jsonl does not exist" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def write_stage_run(folder: Path, validation: list[str], test: list[str], stage_validation: list[str],
                    stage_train: list[str]) -> Path:
    """A run folder with a head stage: each folder's predictions by document id, the stage's data-split.json ids."""
    for where, rows in ((folder, {"validation": validation, "test": test}),
                        (folder / "head_stage", {"validation": stage_validation})):
        where.mkdir(parents=True)
        for role, ids in rows.items():
            (where / f"predictions-{role}.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    (folder / "head_stage" / "data-split.json").write_text(json.dumps({"ids": {"train": stage_train}}))
    return folder


def test_stage_documents_counts_what_each_stage_read_and_fails_when_a_test_document_reached_one(tmp_path):
    script = SCRIPTS / "stage_documents.py"
    clean = write_stage_run(tmp_path / "clean", ["v1", "v2"], ["t1", "t2"], ["v1", "v2"], ["a", "b"])
    result = run_script(script, str(clean), "--json", str(tmp_path / "clean.json"))
    assert result.returncode == 0, result.stderr
    stage = json.loads((tmp_path / "clean.json").read_text())["stages"]["head_stage"]
    assert stage == {"validation": 2, "validation_is_the_runs": True, "validation_in_run_test": 0,
                     "train_in_run_validation": 0, "train_in_run_test": 0}
    leaked = write_stage_run(tmp_path / "leaked", ["v1", "v2"], ["t1", "t2"], ["t1", "t2"], ["a", "v1", "v2"])
    result = run_script(script, str(leaked), "--json", str(tmp_path / "leaked.json"))
    assert result.returncode == 1
    stage = json.loads((tmp_path / "leaked.json").read_text())["stages"]["head_stage"]
    assert (stage["validation_in_run_test"], stage["train_in_run_validation"]) == (2, 2)
    assert "validates on 2 documents (not the run's validation), 2 of them in the run's test of 2" in result.stdout
