"""benchmarks/scripts/make_reach_probe.py builds probes whose evidence lies where their ids say, from the splits it
should come from, in a folder that longbert's own reader loads; benchmarks/scripts/accuracy_by_group.py scores runs by
those ids."""
import gzip
import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from helpers import missing_shared_data, run_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "benchmarks" / "scripts"
DATA_ROOTS = [Path(p) for p in os.environ.get("LONGBERT_DATA_DIR", "").split(os.pathsep) if p] + [
    ROOT.parent / "shared" / "data"]
LENGTH = 300
DEPTHS = "0,40,100,150,end"  # 5 depths x 2 labels: sizes must be multiples of 10
TINY = ["--train", "40", "--validation", "20", "--test", "20", "--length", str(LENGTH), "--min-review-words", "20",
        "--max-review-words", "80"]


def script(name: str, *args) -> subprocess.CompletedProcess:
    return run_script(SCRIPTS / name, *args)


def read_jsonl(file: Path) -> list[dict]:
    opener = gzip.open if file.name.endswith(".gz") else open
    with opener(file, "rt", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def words_of(review: str) -> list[str]:
    return re.sub(r"<br\s*/?>", " ", review).split()


@pytest.fixture(scope="module")
def data_dir() -> Path:
    found = next((r for r in DATA_ROOTS if (r / "imdb").is_dir() and (r / "hyperpartisan").is_dir()), None)
    if found is None:
        missing_shared_data("imdb and hyperpartisan are in neither LONGBERT_DATA_DIR nor ../shared/data")
    return found


@pytest.fixture(scope="module")
def imdb(data_dir) -> dict[str, dict[str, dict]]:
    """{IMDb split: {id: row}}."""
    return {split: {row["id"]: row for row in read_jsonl(data_dir / "imdb" / f"{split}.jsonl.gz")}
            for split in ("train", "test")}


@pytest.fixture(scope="module")
def probes(data_dir, tmp_path_factory) -> dict[str, Path]:
    folders = {}
    for task, extra in (("depth", ["--depths", DEPTHS]), ("majority", [])):
        folders[task] = tmp_path_factory.mktemp(f"reach-{task}")
        result = script("make_reach_probe.py", "--task", task, "--output", folders[task], "--data-dir", data_dir,
                        *TINY, *extra)
        assert result.returncode == 0, result.stderr
    return folders


def splits_of(folder: Path) -> dict[str, list[dict]]:
    return {split: read_jsonl(folder / f"{split}.jsonl") for split in ("train", "validation", "test")}


def imdb_split(split: str) -> str:
    return "test" if split == "test" else "train"


def test_depth_groups_are_balanced_and_each_review_starts_at_its_offset(probes, imdb):
    sizes = {"train": 40, "validation": 20, "test": 20}
    for split, rows in splits_of(probes["depth"]).items():
        cells = Counter((row["id"].rsplit("-", 1)[0], row["label"]) for row in rows)
        assert set(cells.values()) == {sizes[split] // 10} and len(cells) == 10, cells
        assert {group for group, _ in cells} == {"depth-0000", "depth-0040", "depth-0100", "depth-0150", "depth-end"}
        for row in rows:
            words, start = row["text"].split(), row["review_start"]
            review = imdb[imdb_split(split)][row["source_id"]]  # a KeyError would be a review from the wrong split
            expected = words_of(review["text"])
            assert len(words) == LENGTH and 20 <= len(expected) <= 80
            assert words[start : start + len(expected)] == expected, row["id"]
            tag = row["id"].split("-")[1]
            assert start == (LENGTH - len(expected) if tag == "end" else int(tag))
            assert row["label"] == review["label"]


def test_test_reviews_are_unseen_and_no_review_or_filler_crosses_splits(probes, imdb, data_dir):
    train_texts = {" ".join(words_of(row["text"])) for row in imdb["train"].values()}
    hyperpartisan = {name: {row["id"] for row in read_jsonl(data_dir / "hyperpartisan" / f"{name}.jsonl.gz")}
                     for name in ("semeval_train_all", "semeval_test")}
    for task, folder in probes.items():
        splits = splits_of(folder)
        sources = {split: [s for row in rows for s in row.get("source_ids", [row.get("source_id")])]
                   for split, rows in splits.items()}
        for split, used in sources.items():
            assert len(set(used)) == len(used), f"{task} {split}: a review used twice"
            assert all(s.startswith(f"{imdb_split(split)}/") for s in used)
        assert not set(sources["train"]) & set(sources["validation"])
        for source in sources["test"]:
            assert " ".join(words_of(imdb["test"][source]["text"])) not in train_texts
        fillers = {split: {f for row in rows for f in row["filler_ids"]} for split, rows in splits.items()}
        assert fillers["test"] <= hyperpartisan["semeval_test"]
        assert fillers["train"] | fillers["validation"] <= hyperpartisan["semeval_train_all"]
        assert not fillers["test"] & hyperpartisan["semeval_train_all"]
        assert not fillers["train"] & fillers["validation"], "validation reads filler that training never saw"


def test_majority_labels_are_the_majority_and_the_first_review_often_disagrees(probes, imdb):
    for split, rows in splits_of(probes["majority"]).items():
        assert Counter(row["label"] for row in rows)[0] == len(rows) // 2
        disagree = 0
        for row in rows:
            words = row["text"].split()
            assert len(words) == LENGTH
            labels = []
            for source, start in zip(row["source_ids"], row["review_starts"]):
                review = imdb[imdb_split(split)][source]
                expected = words_of(review["text"])
                assert words[start : start + len(expected)] == expected
                labels.append(review["label"])
            assert labels == row["review_labels"]
            assert row["label"] == int(sum(labels) >= 2)
            assert row["id"].split("-")[1] == "".join("np"[label] for label in labels)
            first, middle, last = row["review_starts"]
            assert first == 0 and last + row["review_words"][2] == LENGTH
            assert abs(2 * middle + row["review_words"][1] - LENGTH) <= 1, "the middle review is centred"
            disagree += labels[0] != row["label"]
        assert disagree / len(rows) >= 0.4, f"{split}: the first review disagrees in only {disagree} of {len(rows)}"


def test_longbert_reads_the_probe_folder_with_the_reach_recipe(probes, tokenizer):
    import longbert
    from longbert.data.documents import load_corpus

    recipe = longbert.load_recipe(str(ROOT / "recipes" / "compare" / "reach.yaml"))
    assert recipe.data.path == "runs/data/reach_depth", "the folder make_reach_probe.py writes by default"
    for task, folder in probes.items():
        recipe = longbert.load_recipe(str(ROOT / "recipes" / "compare" / "reach.yaml"), [f"data.path={folder}",
                                                                                          "data.label_names=null"])
        corpus = load_corpus(recipe.data, tokenizer, recipe.seed)
        assert corpus.label_names == ["neg", "pos"], "from the probe's metadata.json"
        assert {role: s["documents"] for role, s in corpus.stats.items()} == {"train": 40, "validation": 20,
                                                                              "test": 20}
        assert corpus.stats["validation"]["source_split"] == "validation", "validation.jsonl, not carved"
        assert all(i.startswith(f"{task}-") for i in corpus.splits["test"]["id"])


def test_the_same_seed_builds_the_same_probe(probes, data_dir, tmp_path):
    result = script("make_reach_probe.py", "--output", tmp_path, "--data-dir", data_dir, "--depths", DEPTHS, *TINY)
    assert result.returncode == 0, result.stderr
    for split in ("train", "validation", "test"):
        assert (tmp_path / f"{split}.jsonl").read_bytes() == (probes["depth"] / f"{split}.jsonl").read_bytes()


def test_make_reach_probe_refuses_bad_input_in_one_line(tmp_path):
    uneven = script("make_reach_probe.py", "--output", tmp_path / "out", "--train", "41")
    assert uneven.returncode == 1
    assert uneven.stderr.strip() == "error: --train 41 must be a multiple of 10 (5 depths x 2 labels)"
    nowhere = script("make_reach_probe.py", "--output", tmp_path / "out", "--data-dir", tmp_path / "nowhere")
    assert nowhere.returncode == 1 and len(nowhere.stderr.strip().splitlines()) == 1
    assert nowhere.stderr.startswith(f"error: {tmp_path / 'nowhere'}") and "Traceback" not in nowhere.stderr


def write_predictions(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "predictions-test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_accuracy_by_group_tabulates_runs_by_id_group(tmp_path):
    rows = lambda right: [{"index": i, "id": f"depth-{d}-{i:06d}", "n_tokens": 1900, "label": i % 2,
                           "predicted": i % 2 if i < right[d] else 1 - i % 2, "probabilities": [0.5, 0.5]}
                          for d in ("0000", "end") for i in range(4)]
    truncate = write_predictions(tmp_path / "truncate", rows({"0000": 4, "end": 1}))
    chunk = write_predictions(tmp_path / "chunk", rows({"0000": 2, "end": 4}))
    tfidf = write_predictions(tmp_path / "tfidf", [{"index": 0, "n_tokens": 9, "label": 1, "predicted": 1,
                                                    "probabilities": [0.2, 0.8]},
                                                   {"index": 1, "n_tokens": 9, "label": 0, "predicted": 1,
                                                    "probabilities": [0.4, 0.6]}])
    result = script("accuracy_by_group.py", truncate, chunk, tfidf, "--json", tmp_path / "groups.json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "| run | all | depth-0000 | depth-end |",
        "|---|---|---|---|",
        f"| {truncate} | 0.6250 (n=8) | 1.0000 (n=4) | 0.2500 (n=4) |",
        f"| {chunk} | 0.7500 (n=8) | 0.5000 (n=4) | 1.0000 (n=4) |",
        f"| {tfidf} | 0.5000 (n=2) | - | - |",
    ]
    assert "tfidf_baseline.py writes no ids" in result.stderr
    numbers = json.loads((tmp_path / "groups.json").read_text())
    assert numbers["groups"] == ["depth-0000", "depth-end"]
    assert numbers["runs"][0]["groups"]["depth-end"] == {"accuracy": 0.25, "documents": 4}
    assert numbers["runs"][2]["ungrouped"] == 2


def test_accuracy_by_group_refuses_a_missing_run_or_predictions_in_one_line(tmp_path):
    missing = script("accuracy_by_group.py", tmp_path / "nope")
    assert missing.returncode == 2 and missing.stderr.strip() == f"error: {tmp_path / 'nope'} is not a folder"
    (tmp_path / "empty").mkdir()
    bare = script("accuracy_by_group.py", tmp_path / "empty")
    assert bare.returncode == 2 and len(bare.stderr.strip().splitlines()) == 1
    assert bare.stderr.startswith(f"error: {tmp_path / 'empty'} holds no predictions-test.jsonl")
