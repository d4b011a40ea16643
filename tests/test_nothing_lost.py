"""Nothing lost: every command that writes is run against places holding a user's files (sentinels), and
every sentinel must survive. The cases:

- beside: a file in the folder the output goes into (its parent) survives the write;
- inside: a file in an existing output folder survives, either because the command refuses in one line (exit 2,
  the folder untouched) or because it replaces only its own earlier output (run twice, the file planted between);
- race: an output folder that appears, with a user's file in it, while the command runs (made at the moment of the
  final swap, `longbert.utils.outputs.swap_in`) is refused in one line and kept;
- input: the input (or the model read) named as the output is refused in one line and kept.

TABLE holds every case by the command it runs; a command of the CLI that is neither in it nor in WRITE_NOTHING fails
`test_every_command_is_in_the_table`, so that a new command that writes cannot be left out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable, NamedTuple

import pytest
from typer.testing import CliRunner

import longbert.comparison.render as render
import longbert.inference.export as export_module
import longbert.inference.quantize as quantize_module
import longbert.utils.outputs as outputs
from helpers import ONE_STAGE
from longbert.cli import app
from longbert.comparison.learning_curve import write_curve
from longbert.errors import LongbertError
from longbert.modeling.classifier import LongDocumentClassifier

pytestmark = pytest.mark.heavy  # trains models

BESIDE, INSIDE, RACE, INPUT = "beside", "inside", "race", "input"
APPEARED = "appeared or changed while this command ran"
REPORTS = Path(__file__).resolve().parents[1] / "reports"
WRITE_NOTHING = {"strategies": "prints the registry", "serve": "answers over HTTP; it writes no file"}
PYTHON_WRITERS = {"save_pretrained"}  # writers of the Python API, beside the CLI's commands
FILE_WRITERS = {"evaluate", "quantize", "predict", "embed"}  # files only, each renamed into place: no folder swapped
TABLE: dict[str, tuple[str, tuple[str, ...], Callable]] = {}  # case id -> (command, kinds, test body)
runner = CliRunner()


def case(command: str, *kinds: str):
    def register(body):
        TABLE[f"{command}-{'-'.join(kinds)}"] = (command, kinds, body)
        return body
    return register


class Place(NamedTuple):
    tmp: Path
    runs: dict[str, Path]  # shared by every case: `own` copies one before a case writes into it
    recipe: list[str]  # tiny_recipe's overrides
    monkeypatch: pytest.MonkeyPatch

    def own(self, name: str = "r0") -> Path:
        return Path(shutil.copytree(self.runs[name], self.tmp / name))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, tiny_backbone_dir, imdb_slice):
    """Two finished tiny runs (seeds 0 and 1), trained into a folder that holds a user's file beside them."""
    import longbert

    root = tmp_path_factory.mktemp("runs")
    beside = plant(root)
    base = [f"backbone.name={tiny_backbone_dir}", f"data.path={imdb_slice}", "data.label_names=[neg, pos]",
            "data.validation_fraction=0.25", "data.max_document_tokens=200", "strategy.name=chunk",
            "strategy.window=62", "train.epochs=1", "train.batch_size=8", "train.learning_rate=1e-3",
            "train.mixed_precision=no", "eval.batch_size=16", "data.seed=1", "data.max_train_documents=16",
            "data.max_eval_documents=8", *ONE_STAGE]
    runs = {f"r{seed}": longbert.train(longbert.load_recipe(None, [*base, f"seed={seed}",
                                                                   f"output_dir={root / f'r{seed}'}"])).folder
            for seed in (0, 1)}
    return {**runs, "beside": beside}


def plant(folder: Path, name: str = "notes.txt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(f"mine: {name}")
    return folder / name


def kept(*sentinels: Path) -> None:
    for sentinel in sentinels:
        assert sentinel.read_text() == f"mine: {sentinel.name}", sentinel


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def ok(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def refused(*args, says: str, logged: bool = False) -> str:
    """Run a command that must refuse: exit 2 and one line holding `says` (`logged`: a training's status lines come
    before it, and it is the last line and the only error)."""
    result = runner.invoke(app, [str(a) for a in args])
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("error", "Traceback"))]
    assert result.exit_code == 2 and (logged or len(lines) == 1), result.output
    assert errors == lines[-1:] and says in lines[-1], result.output
    return lines[-1]


def appearing(monkeypatch, output: Path, move_aside: bool = False) -> list[Path]:
    """When the folder `output` is about to be swapped in, a folder appears in its place holding a user's file
    (`move_aside`: the folder there is moved to NAME-moved first, as a user replacing it would). Returns the sentinels
    planted (one, once it ran)."""
    real, planted = outputs.swap_in, []

    def swap_in(staging, target, marker, what):
        if not planted and target.resolve() == output.resolve():
            if move_aside:
                target.rename(target.with_name(f"{target.name}-moved"))
            planted.append(plant(target, "mine.txt"))
        return real(staging, target, marker, what)

    monkeypatch.setattr(outputs, "swap_in", swap_in)
    return planted


def raced(place: Place, output: Path, *args, move_aside: bool = False, logged: bool = False) -> None:
    planted = appearing(place.monkeypatch, output, move_aside)
    refused(*args, says=APPEARED, logged=logged)
    alone(planted, output)


def alone(planted: list[Path], output: Path) -> None:
    """The one sentinel planted is kept, alone in its folder, and no staging or swapped-out folder is left beside."""
    assert len(planted) == 1
    kept(*planted)
    assert [p.name for p in output.iterdir()] == ["mine.txt"]
    assert not [p.name for p in output.parent.iterdir() if p.name.startswith(f".{output.name}.")]


def cheap_training(place: Place, output: Path) -> list[str]:
    overrides = [*place.recipe, "data.max_train_documents=8", "data.max_eval_documents=4", "train.epochs=1",
                 f"output_dir={output}"]
    return [x for o in overrides for x in ("--set", o)]


def texts(place: Place, name: str = "in.txt") -> Path:
    (place.tmp / name).write_text("a good film, well played\na dull film that never ends\n")
    return place.tmp / name


# ---------------------------------------------------------------------------------------------------------------
# train and pretrain: a run folder


@case("train", BESIDE)
def _(place):
    kept(place.runs["beside"])  # planted beside both runs before they trained
    assert all((place.runs[r] / "metrics.json").is_file() for r in ("r0", "r1"))


@case("train", INSIDE)
def _(place):
    mine = plant(place.tmp / "mine")
    refused("train", *cheap_training(place, mine.parent), says="holds files that no longbert run wrote")
    kept(mine)
    run = place.own()
    mine = [plant(run), plant(run / "best")]
    before = snapshot(run)
    refused("train", run / "recipe.yaml", "--set", f"output_dir={run}", says="already holds a run")
    assert snapshot(run) == before
    kept(*mine)


@case("train", RACE)
def _(place):
    run = place.tmp / "run"
    raced(place, run / "best", "train", *cheap_training(place, run), logged=True)  # the kept model


PRETRAIN_CORPUS = "the film follows a young woman who moves to the city and finds work in a small bakery . " * 8


def pretraining(place: Place, output: Path) -> list:
    corpus = place.tmp / "corpus"
    if not corpus.exists():
        corpus.mkdir()
        (corpus / "unsupervised.jsonl").write_text("".join(json.dumps({"text": PRETRAIN_CORPUS, "label": -1}) + "\n"
                                                           for _ in range(8)))
        (place.tmp / "tiny.yaml").write_text("name: tiny_pretrain\n")
    backbone = next(o for o in place.recipe if o.startswith("backbone.name="))
    overrides = [backbone, f"data.path={corpus}", "strategy.name=chunk", "strategy.window=126",
                 "data.heldout_fraction=0.25", "train.steps=2", "train.head_steps=1", "train.batch_size=4",
                 "train.warmup_ratio=0", "train.mixed_precision=no", "eval.batch_size=8", f"output_dir={output}"]
    return ["pretrain", place.tmp / "tiny.yaml", *[x for o in overrides for x in ("--set", o)]]


@case("pretrain", BESIDE, INSIDE)
def _(place):
    out = place.tmp / "out" / "run"
    beside = plant(out.parent)
    ok(*pretraining(place, out))
    kept(beside)
    mine = [plant(out), plant(out / "backbone")]
    before = snapshot(out)
    refused(*pretraining(place, out), says="already holds a run")
    assert snapshot(out) == before
    kept(*mine)
    other = plant(place.tmp / "other")
    refused(*pretraining(place, other.parent), says="holds files that no longbert run wrote")
    kept(other)


@case("pretrain", RACE)
def _(place):
    run = place.tmp / "run"
    raced(place, run / "backbone", *pretraining(place, run), logged=True)


# ---------------------------------------------------------------------------------------------------------------
# evaluate and quantize: files written into a run folder


@case("evaluate", BESIDE, INSIDE)
def _(place):
    run = place.own()
    mine = [plant(run), plant(run / "best")]
    own_rows = (run / "predictions-test.jsonl").read_bytes()
    ok("evaluate", run, "--split", "test", "--set", "data.max_eval_documents=4")
    assert (run / "predictions-test-with-overrides.jsonl").is_file()
    assert (run / "predictions-test.jsonl").read_bytes() == own_rows  # the run's own test rows: other documents
    kept(*mine)


# What `longbert quantize` measures (its three passes over validation take a second): a stand-in, since what is tested
# here is where it is written (the measurement has its tests in tests/inference/test_quantize.py).
MEASURED = {"split": "validation", "documents": 8, "agreement_plain": 1.0, "accuracy_plain": 0.5, "seconds_plain": 0.1,
            "agreement_target": 0.99, "recheck_gap": 0.0, "rechecked": 0.0, "agreement": 1.0, "accuracy_fp32": 0.5,
            "accuracy_int8": 0.5, "seconds_fp32": 0.1, "seconds_int8": 0.1, "batch_size": 16, "machine": {}}


@case("quantize", BESIDE, INSIDE)
def _(place):
    place.monkeypatch.setattr(quantize_module, "_measure", lambda model, dataset, batch, agreement: dict(MEASURED))
    run = place.own()
    mine = [plant(run), plant(run / "best")]
    ok("quantize", run)
    assert json.loads((run / "best" / "training.json").read_text())["int8"] == MEASURED
    kept(*mine)


# ---------------------------------------------------------------------------------------------------------------
# predict and embed: one file (-o FILE replaces that file, you named it; nothing else)


@case("predict", BESIDE, INSIDE)
def _(place):
    out = place.tmp / "out"
    beside, page_folder = plant(out), plant(out / "page")
    (out / "p.jsonl").write_text("an earlier output\n")
    ok("predict", place.runs["r0"], texts(place), "-o", out / "p.jsonl", "--explain", out / "page")
    assert len((out / "p.jsonl").read_text().splitlines()) == 2 and (out / "page" / "explain.html").is_file()
    kept(beside, page_folder)


@case("predict", INPUT)
def _(place):
    source = texts(place)
    run = place.own()
    before, model = source.read_text(), snapshot(run)
    refused("predict", run, source, "-o", source, says="is the input")
    refused("predict", run, source, "-o", run / "best" / "p.jsonl", says="inside the model folder")
    page = place.tmp / "in.html"  # a text per line, read as any file that is not a data file
    page.write_text(before)
    refused("predict", run, page, "--explain", page, says="is the input")
    refused("predict", run, source, "-o", place.tmp / "p.html", "--explain", place.tmp / "p.html",
            says="the --output file")
    refused("predict", run, source, "--explain", run / "best", says="inside the model folder")
    assert source.read_text() == page.read_text() == before and snapshot(run) == model
    assert not (place.tmp / "p.html").exists()


@case("embed", BESIDE)
def _(place):
    out = place.tmp / "out"
    beside = plant(out)
    ok("embed", place.runs["r0"], texts(place), "-o", out / "v.npy")
    assert (out / "v.npy").is_file()
    kept(beside)


@case("embed", INPUT)
def _(place):
    source = place.tmp / "in.jsonl"
    source.write_text(json.dumps({"text": "a good film"}) + "\n" + json.dumps({"text": "a dull film"}) + "\n")
    run = place.own()
    before, model = source.read_text(), snapshot(run)
    refused("embed", run, source, "-o", source, says="is the input")
    refused("embed", run, source, "-o", run / "best" / "v.npy", says="inside the model folder")
    assert source.read_text() == before and snapshot(run) == model


# ---------------------------------------------------------------------------------------------------------------
# ensemble, hybrid, export: a folder of their own


@case("ensemble", BESIDE, INSIDE)
def _(place):
    e = place.tmp / "out" / "e"
    members = [place.runs["r0"], place.runs["r1"]]
    beside = plant(e.parent)
    ok("ensemble", *members, "--output", e)
    ok("hybrid", e)  # e/hybrid: another command's output inside it
    notes = plant(e)
    ok("ensemble", *members, "--output", e)
    kept(beside, notes)
    assert (e / "hybrid" / "hybrid.json").is_file() and (e / "ensemble-summary.json").is_file()
    other = plant(place.tmp / "other")
    refused("ensemble", *members, "--output", other.parent, says="did not write")
    kept(other)


@case("ensemble", RACE)
def _(place):
    raced(place, place.tmp / "e", "ensemble", place.runs["r0"], place.runs["r1"], "--output", place.tmp / "e")


@case("ensemble", INPUT)
def _(place):
    run = place.own()
    before = snapshot(run)
    refused("ensemble", run, place.runs["r1"], "--output", run, says="is the run folder")
    assert snapshot(run) == before


@case("hybrid", BESIDE, INSIDE)
def _(place):
    run = place.own()
    beside = plant(run)
    ok("hybrid", run)
    notes = plant(run / "hybrid")
    ok("hybrid", run)
    kept(beside, notes)
    other = plant(place.tmp / "other")
    refused("hybrid", run, "--output", other.parent, says="did not write")
    kept(other)


@case("hybrid", RACE)
def _(place):
    raced(place, place.tmp / "h", "hybrid", place.runs["r0"], "--output", place.tmp / "h")


@case("hybrid", INPUT)
def _(place):
    run = place.own()
    before = snapshot(run)
    refused("hybrid", run, "--output", run, says="is the run folder")
    assert snapshot(run) == before


def stub_graphs(monkeypatch) -> None:
    """Export's ONNX graphs take seconds to trace; what is tested here is where the folder goes, so a stand-in file
    is written instead (the graphs have their tests in tests/inference/test_export.py)."""
    monkeypatch.setattr(export_module, "write_graphs",
                        lambda model, folder, quantize: (folder / "encoder.onnx").write_bytes(b"stand-in") and {})


@case("export", BESIDE)
def _(place):
    stub_graphs(place.monkeypatch)
    beside = plant(place.tmp / "out")
    ok("export", place.runs["r0"], "--output", place.tmp / "out" / "x", "--parity-documents", 0)
    assert (place.tmp / "out" / "x" / "export.json").is_file()
    kept(beside)


@case("export", INSIDE)
def _(place):
    mine = plant(place.tmp / "x")
    (place.tmp / "empty").mkdir()
    for folder in (mine.parent, place.tmp / "empty"):  # export takes a new folder only
        refused("export", place.runs["r0"], "--output", folder, "--parity-documents", 0, says="already exists")
    kept(mine)
    assert not any((place.tmp / "empty").iterdir())


@case("export", RACE)
def _(place):
    stub_graphs(place.monkeypatch)
    raced(place, place.tmp / "x", "export", place.runs["r0"], "--output", place.tmp / "x", "--parity-documents", 0)


@case("export", INPUT)
def _(place):
    run = place.own()
    before = snapshot(run)
    refused("export", run, "--output", run / "best", says="already exists")
    assert snapshot(run) == before


# ---------------------------------------------------------------------------------------------------------------
# report and compare: a report folder. One compare trains its strategies (over 8 s on the tiny model), so compare is
# not run here: the report it writes is written by `write_report`, which `longbert report` runs (its cases), and a
# learning curve's by `write_curve`, run here directly. A report folder of a user's files is refused before any
# training through the CLI in tests/comparison/test_compare.py.


def committed_report(place: Place) -> Path:
    """A copy of a committed report (the one of the fewest rows: its plots take the least time)."""
    return Path(shutil.copytree(REPORTS / "imdb_curve_setfit254-n100", place.tmp / "reports" / "n100"))


@case("report", BESIDE, INSIDE)
def _(place):
    report = committed_report(place)
    mine = [plant(report.parent), plant(report), plant(report, "my-plot.png")]
    ok("report", report)
    kept(*mine)
    assert json.loads((report / "results.json").read_text())["report"]["folder"] == str(report)
    other = plant(place.tmp / "other")
    refused("report", other.parent, says="holds no results.json")
    kept(other)


@case("report", RACE)
def _(place):
    place.monkeypatch.setattr(render, "make_plots", lambda results: {})  # the plots take time; the pages are enough
    report = committed_report(place)
    before = snapshot(report)
    raced(place, report, "report", report, move_aside=True)
    assert snapshot(report.with_name("n100-moved")) == before


@case("compare", BESIDE, INSIDE)
def _(place):
    curve = Path(shutil.copytree(REPORTS / "imdb_curve_setfit254", place.tmp / "reports" / "curve"))
    mine = [plant(curve.parent), plant(curve)]
    write_curve(json.loads((curve / "curve.json").read_text()), curve)  # --train-sizes' own report folder
    kept(*mine)


@case("compare", RACE)
def _(place):
    curve = json.loads((REPORTS / "imdb_curve_setfit254" / "curve.json").read_text())
    planted = appearing(place.monkeypatch, place.tmp / "reports" / "n")
    with pytest.raises(LongbertError, match=APPEARED):
        write_curve(curve, place.tmp / "reports" / "n")
    alone(planted, place.tmp / "reports" / "n")


# ---------------------------------------------------------------------------------------------------------------
# LongDocumentClassifier.save_pretrained: a model folder


@case("save_pretrained", BESIDE, INSIDE)
def _(place):
    model = LongDocumentClassifier.from_pretrained(place.runs["r0"])
    folder = place.tmp / "out" / "model"
    beside = plant(folder.parent)
    model.save_pretrained(folder)
    notes = plant(folder)
    model.save_pretrained(folder)
    kept(beside, notes)
    other = plant(place.tmp / "other")
    with pytest.raises(LongbertError, match="did not write"):
        model.save_pretrained(other.parent)
    kept(other)


@case("save_pretrained", RACE)
def _(place):
    planted = appearing(place.monkeypatch, place.tmp / "model")
    with pytest.raises(LongbertError, match=APPEARED):
        LongDocumentClassifier.from_pretrained(place.runs["r0"]).save_pretrained(place.tmp / "model")
    alone(planted, place.tmp / "model")


@case("save_pretrained", INPUT)
def _(place):
    best = place.own() / "best"
    notes = plant(best)
    model = LongDocumentClassifier.from_pretrained(best)
    model.save_pretrained(best)  # its own folder: its files written again, a user's kept
    kept(notes)
    again = LongDocumentClassifier.from_pretrained(best)
    assert again.label_names == model.label_names


# ---------------------------------------------------------------------------------------------------------------


def test_every_command_is_in_the_table():
    """A command of the CLI is either a writer with cases here, or named as writing nothing."""
    commands = {c.name or c.callback.__name__ for c in app.registered_commands}
    commands |= {g.name or g.typer_instance.info.name for g in app.registered_groups}
    writers = {command for command, _, _ in TABLE.values()}
    missing = commands - writers - set(WRITE_NOTHING)
    assert not missing, f"commands neither tested here nor said to write nothing: {sorted(missing)}"
    assert set(WRITE_NOTHING) <= commands and writers - PYTHON_WRITERS <= commands
    for command in writers:
        kinds = {kind for c, ks, _ in TABLE.values() if c == command for kind in ks}
        assert BESIDE in kinds, command
        assert command in FILE_WRITERS or {INSIDE, RACE} <= kinds, command  # a folder: in it, and appearing
        assert command not in ("predict", "embed") or INPUT in kinds, command


@pytest.mark.parametrize("name", sorted(TABLE))
def test_nothing_lost(name, two_runs, tiny_recipe, tmp_path, monkeypatch):
    TABLE[name][2](Place(tmp_path, two_runs, tiny_recipe, monkeypatch))
