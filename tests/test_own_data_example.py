"""examples/own_data.py does what it prints: it writes a sample csv of labelled texts, trains on it with the one-line
`longbert train --set data.path=reviews.csv` (a tiny random-weight BERT here), and predicts; given a file of one's
own that cannot be cut, it stops with the command's one-line error."""

import json
import runpy
import sys
from pathlib import Path

import pytest

from longbert.modeling.classifier import LongDocumentClassifier

pytestmark = pytest.mark.heavy  # trains a model

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "own_data.py"


def run_example(args, monkeypatch) -> dict:
    """Run examples/own_data.py with `args` as its command line, as `python examples/own_data.py` would; its globals."""
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), *map(str, args)])
    return runpy.run_path(str(EXAMPLE), run_name="__main__")


def tiny(backbone: str) -> list[str]:
    settings = ["strategy.name=chunk", "strategy.window=40", "train.epochs=1", "train.head_first=false",
                "train.batch_size=8", "train.mixed_precision=no", "eval.batch_size=16"]
    return ["--backbone", backbone] + [a for s in settings for a in ("--set", s)]


def test_the_example_trains_on_its_sample_file_in_one_line_and_predicts(tiny_backbone_dir, tmp_path, monkeypatch,
                                                                        capsys):
    monkeypatch.chdir(tmp_path)
    ran = run_example(tiny(tiny_backbone_dir), monkeypatch)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "wrote reviews.csv: 40 made-up reviews (columns text, label)"
    assert lines[1].startswith(f"$ longbert train --set data.path=reviews.csv --set backbone.name={tiny_backbone_dir}")
    run = Path("runs/reviews")
    assert "run folder: runs/reviews" in lines and any(line.startswith("test accuracy") for line in lines)
    cut = json.loads((run / "data-split.json").read_text())
    assert {s: len(r) for s, r in cut["rows"].items()} == {"train": 32, "validation": 4, "test": 4}
    assert f"the cut of reviews.csv (seed 42): 32 train, 4 validation, 4 test ({run}/data-split.json)" in lines
    expected = LongDocumentClassifier.from_pretrained(run).predict(ran["new_texts"])
    printed = [line for line in lines if line.split("  ", 1)[0] in ("pos", "neg")]
    assert len(printed) == len(expected) == 2
    for line, row in zip(printed, expected):
        assert line.startswith(f"{row['label']}  (") and f"{row['n_tokens']} tokens: " in line


@pytest.mark.slow  # three subprocess starts; the commands' own one-line errors are tested in process by test_cli
def test_the_example_takes_a_users_file_and_stops_with_the_commands_one_line_error(tiny_backbone_dir, tmp_path,
                                                                                   monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine.jsonl"
    mine.write_text("".join(json.dumps({"text": f"text number {i}", "label": "a" if i else "b"}) + "\n"
                            for i in range(12)))
    with pytest.raises(SystemExit) as stopped:
        run_example([mine, *tiny(tiny_backbone_dir)], monkeypatch)
    assert stopped.value.code == 2
    errors = [line for line in capfd.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "class 'b' has 1 document" in errors[0]
    assert not (tmp_path / "reviews.csv").exists() and not (tmp_path / "runs" / "mine").exists()
