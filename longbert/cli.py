"""The `longbert` command: thin wrappers that parse arguments and call library functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from longbert.commands import (
    CALIBRATION,
    INPUT_HELP,
    MIN_CONFIDENCE,
    PRECISION_HELP,
    RUNTIME,
    OneLineUsageErrors,
    classic_metavars,
    command_line,
    run_command,
    start_up,
)
from longbert.config.limits import check_counts  # standard library and errors only: no torch at start-up
from longbert.errors import LongbertError
from longbert.inference.serve_api import Limits  # standard library only: the serve options' defaults
from longbert.utils.folders import BEST, METRICS_PAGE

app = typer.Typer(cls=OneLineUsageErrors, add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, context_settings={"max_content_width": 120},
                  help="Classify long documents with BERT: train, evaluate, predict and compare strategies; "
                       "pretrain a backbone further.")


def _version(value: bool) -> None:
    if value:
        from longbert import __version__

        typer.echo(f"longbert {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the version and exit"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="status lines off: warnings and errors only (also "
                               "LONGBERT_VERBOSITY=warning)"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="debug lines too (also LONGBERT_VERBOSITY=debug)"),
):
    """Classify long documents with BERT: train, evaluate, predict and compare strategies."""
    start_up(quiet, verbose)


@app.command()
def train(
    recipe: Optional[Path] = typer.Argument(None, help="YAML recipe file, or the name of a packaged recipe "
                                                         "(e.g. imdb_sliding); leave it out to take every setting "
                                                         "from --set"),
    set_: List[str] = typer.Option([], "--set", help="override a recipe field: key.path=value (repeatable)"),
    resume: bool = typer.Option(False, "--resume", help="continue the run in the recipe's output_dir from its "
                                                        "last checkpoint"),
):
    """Train a recipe; writes a run folder with the kept model, metrics and the resolved recipe."""
    from longbert.config import load_recipe
    from longbert.evaluation.metrics import headline
    from longbert.training.trainer import train as run_training

    def action():
        if recipe is None and not set_:
            raise LongbertError("train needs a recipe file (or a packaged recipe name), or its settings as "
                                "--set key.path=value, e.g. --set data.path=imdb --set strategy.name=chunk")
        result = run_training(load_recipe(recipe, set_), resume=resume, command=command_line())
        test = result.record.test
        summary = f"run folder: {result.folder}"
        if test:
            summary += f"\ntest {headline(test)}"
        typer.echo(summary)

    run_command(action)


@app.command()
def pretrain(
    recipe: Path = typer.Argument(..., help="YAML pretraining recipe, or the name of a packaged one "
                                            "(e.g. pretrain_imdb_cpu)"),
    set_: List[str] = typer.Option([], "--set", help="override a recipe field: key.path=value (repeatable)"),
    resume: bool = typer.Option(False, "--resume", help="continue the run in the recipe's output_dir from its "
                                                        "last checkpoint"),
):
    """Continue masked-language-model training of a backbone on unlabelled long text, read through a strategy;
    writes <run folder>/backbone, usable as a training recipe's backbone.name."""
    from longbert.config import load_pretrain_recipe
    from longbert.training.pretraining.pretrain import pretrain as run_pretraining

    def action():
        result = run_pretraining(load_pretrain_recipe(recipe, set_), resume=resume, command=command_line())
        typer.echo(f"run folder: {result.folder}\nbackbone: {result.model} (use it as backbone.name)\n"
                   f"details in {result.folder / METRICS_PAGE}")

    run_command(action)


@app.command()
def evaluate(
    run_dir: Path = typer.Argument(..., help="a run folder written by `longbert train`"),
    split: str = typer.Option("test", help="train, validation or test"),
    batch_size: Optional[int] = typer.Option(None, help="documents per inference step (default: the recipe's)"),
    set_: List[str] = typer.Option([], "--set", help="override the run's data or eval settings: key.path=value, e.g. "
                                                     "data.max_eval_documents=100 (repeatable)"),
    precision: str = typer.Option("auto", "--precision", help=PRECISION_HELP),
    calibrated: bool = CALIBRATION,
):
    """Evaluate a run's kept model on one split; writes metrics-<split>.json/.md and predictions-<split>.jsonl into the
    run folder (with --set data.*: <split>-with-overrides, beside the run's own)."""
    from longbert.evaluation.evaluate import evaluate as run_evaluation
    from longbert.evaluation.evaluate import evaluation_page
    from longbert.evaluation.metrics import headline

    def action():
        check_counts({"--batch-size": batch_size})
        metrics = run_evaluation(run_dir, split, batch_size, set_, precision=precision, calibrated=calibrated)
        typer.echo(f"{split}: {headline(metrics)}; details in {evaluation_page(run_dir, split, set_, calibrated)}")

    run_command(action)


@app.command()
def predict(
    model_dir: Path = typer.Argument(..., help="a run folder, a saved model folder, a hub model id (user/repo), or an "
                                               "exported folder (onnxruntime)"),
    input: str = typer.Argument("-", help=INPUT_HELP),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="write JSONL here instead of stdout"),
    batch_size: int = typer.Option(16, help="documents per inference step"),
    text_column: str = typer.Option("text", "--text-column", help="the column holding the texts (tables only)"),
    id_column: Optional[str] = typer.Option(None, "--id-column", help="the column whose values become each row's id "
                                                                      "(default: the row number, from 0)"),
    keep: List[str] = typer.Option([], "--keep", help="copy this input column into every output row (repeatable)"),
    precision: str = typer.Option("auto", "--precision", help=PRECISION_HELP),
    split: Optional[str] = typer.Option(None, "--split", help="the split to read, when the input holds several (a "
                                        "hub dataset, a saved DatasetDict, a folder of split files)"),
    explain: Optional[Path] = typer.Option(None, "--explain", metavar="HTML_OR_DIR", help=(
        "also say how much each chunk/window weighed: 'units' and 'decisive' fields in every line, and an HTML page "
        "highlighting the decisive passage (a .html file, or a folder that gets explain.html)")),
    calibrated: bool = CALIBRATION,
    min_confidence: Optional[float] = MIN_CONFIDENCE,
    runtime: str = RUNTIME,
):
    """Predict labels for new texts; JSON lines out, in input order, with the id, the label, the class probabilities
    and the length in tokens. Several processes: accelerate launch -m longbert.cli predict ..."""
    from longbert.inference.predict import predict_file

    def action():
        check_counts({"--batch-size": batch_size})
        message = predict_file(model_dir, input, output, batch_size, text_column, id_column, tuple(keep), precision,
                               split, explain, calibrated, min_confidence, runtime).report()
        if message:
            typer.echo(message, err=True)

    run_command(action)


@app.command()
def embed(
    model_dir: Path = typer.Argument(..., help="a run folder, a saved model folder or a hub model id (user/repo)"),
    input: str = typer.Argument(..., help=INPUT_HELP),
    output: Path = typer.Option(..., "--output", "-o", help="vectors.npy (numpy: documents x hidden, input order) or "
                                                            "vectors.jsonl (id, kept columns, embedding)"),
    batch_size: int = typer.Option(16, help="documents per inference step"),
    text_column: str = typer.Option("text", "--text-column", help="the column holding the texts (tables only)"),
    id_column: Optional[str] = typer.Option(None, "--id-column", help="the column whose values become each row's id "
                                                                      "in .jsonl (default: the row number, from 0)"),
    keep: List[str] = typer.Option([], "--keep", help="copy this input column into every .jsonl row (repeatable)"),
    precision: str = typer.Option("auto", "--precision", help=PRECISION_HELP),
    split: Optional[str] = typer.Option(None, "--split", help="the split to read, when the input holds several"),
):
    """Write each text's document vector (what the model's head reads), for search, clustering or a classifier of
    your own; documents of any length, read as predict reads them."""
    from longbert.inference.embed import embed_file

    def action():
        check_counts({"--batch-size": batch_size})
        done = embed_file(model_dir, input, output, batch_size, text_column, id_column, tuple(keep), precision, split)
        if done.written:
            typer.echo(f"{done.documents:,} document vectors of {done.size} numbers written to {output}", err=True)

    run_command(action)


@app.command()
def export(
    model_dir: Path = typer.Argument(..., help="a run folder or a saved model folder whose strategy reads "
                                               "independent windows (`longbert strategies` marks them)"),
    format: str = typer.Option("onnx", "--format", help="onnx: a per-window encoder graph and a pooling+head graph"),
    quantize: Optional[str] = typer.Option(None, "--quantize", help="int8: also an int8 encoder (onnxruntime dynamic "
                                                                     "quantization), used by default when present"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="the folder to write (must not exist; "
                                                                       "default: MODEL_DIR/onnx)"),
    parity_texts: Optional[str] = typer.Option(None, "--parity-texts", help=(
        "texts to check the export on: what predict reads (a 'text' column); default: test texts of the run's data")),
    parity_documents: int = typer.Option(32, "--parity-documents", help="how many of the run's test texts to check on"),
    calibrated: bool = CALIBRATION,
):
    """Export a model to ONNX for onnxruntime (documents of any length); writes parity.json against PyTorch fp32."""
    from longbert.inference.export import export_model, parity_line
    from longbert.inference.predict import read_documents

    def action():
        check_counts({"--parity-documents": parity_documents})
        texts = None if parity_texts is None else list(read_documents(parity_texts)["text"])
        result = export_model(model_dir, output, format, quantize, texts, parity_documents, calibrated)
        typer.echo(f"exported to {result.folder}\nparity: {parity_line(result.parity)}")

    run_command(action)


_LIMITS = Limits()


@app.command()
def serve(
    model_dir: Path = typer.Argument(..., help="a run folder, a saved model or an exported folder (onnxruntime)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (0.0.0.0: every interface)"),
    port: int = typer.Option(8000, "--port", help="port to listen on"),
    max_batch: int = typer.Option(16, "--max-batch", help="the most texts of concurrent requests run together"),
    max_wait_ms: float = typer.Option(5.0, "--max-wait-ms", help="how long a batch waits for more requests"),
    max_request_bytes: int = typer.Option(_LIMITS.body_bytes, "--max-request-bytes", show_default=False, help=(
        f"the largest request body, in bytes (default {_LIMITS.body_bytes:,}: 8 MiB); a larger one is answered 413")),
    max_request_texts: int = typer.Option(_LIMITS.texts, "--max-request-texts", show_default=False, help=(
        f"the most texts one request may hold (default {_LIMITS.texts:,}); more are answered 413")),
    max_request_tokens: int = typer.Option(_LIMITS.tokens, "--max-request-tokens", show_default=False, help=(
        f"the most tokens one request's texts may come to, each counted up to the model's max_document_tokens "
        f"(default {_LIMITS.tokens:,}); more are answered 413")),
    precision: str = typer.Option("auto", "--precision", help=PRECISION_HELP + "; PyTorch models only"),
    calibrated: bool = CALIBRATION,
    min_confidence: Optional[float] = MIN_CONFIDENCE,
    runtime: str = RUNTIME,
):
    """Serve a model over HTTP: POST /predict {"texts": [...]} or {"text": ...}, GET /health."""
    from longbert.inference.serve import serve as run_server

    def action():
        check_counts({"--max-batch": max_batch, "--max-request-bytes": max_request_bytes,
                      "--max-request-texts": max_request_texts, "--max-request-tokens": max_request_tokens})
        run_server(model_dir, host, port, max_batch, max_wait_ms, announce=typer.echo, precision=precision,
                   max_request_bytes=max_request_bytes, max_request_texts=max_request_texts,
                   max_request_tokens=max_request_tokens, calibrated=calibrated, min_confidence=min_confidence,
                   runtime=runtime)

    run_command(action)


@app.command()
def quantize(
    run_dir: Path = typer.Argument(..., help="a run folder written by `longbert train`"),
    batch_size: Optional[int] = typer.Option(None, help="documents per inference step (default: the recipe's)"),
    agreement: float = typer.Option(0.99, min=0.0, max=1.0, help="the label agreement with fp32 the recheck gap is "
                                    "chosen for: the smallest gap that reaches it on the validation split"),
):
    """Measure int8 inference (--precision int8) against fp32 on the run's validation split, once: choose the gap
    under which int8's close calls are read again in fp32, and record the label agreement, both accuracies and both
    speeds in its kept model's training.json and model card."""
    from longbert.inference.quantize import quantize as measure

    def action():
        check_counts({"--batch-size": batch_size})
        m = measure(run_dir, batch_size, agreement)
        typer.echo(f"int8 against fp32 on {m['documents']} validation documents: labels agree on "
                   f"{100 * m['agreement']:.1f}% ({100 * m['agreement_plain']:.1f}% with nothing read again; recheck "
                   f"gap {m['recheck_gap']:g}, {100 * m['rechecked']:.1f}% read again in fp32); "
                   f"accuracy {100 * m['accuracy_fp32']:.1f}% -> "
                   f"{100 * m['accuracy_int8']:.1f}%; {m['seconds_fp32']:.1f} s -> {m['seconds_int8']:.1f} s; "
                   f"recorded in {run_dir / BEST} (training.json, README.md)")

    run_command(action)


@app.command()
def ensemble(
    run_dirs: List[Path] = typer.Argument(..., help="two or more run folders trained on the same data (single-label)"),
    output: Path = typer.Option(..., "--output", help="where the ensemble goes (a new folder, or an older ensemble, "
                                "which is replaced)"),
    use_all: bool = typer.Option(False, "--all", help="every run given, nothing chosen (default: the group of two or "
                                 "more that scores best on validation)"),
):
    """Make one model folder of several runs whose probabilities are averaged: the members chosen on their kept
    validation predictions as compare chooses its ensemble row; predict, evaluate, serve and explain load it."""
    from longbert.ensembles.ensemble_folder import make_ensemble

    def action():
        result = make_ensemble(run_dirs, output, use_all)
        s = result.metrics
        v = s["validation"]
        scores = "" if v is None else (f"; validation {s['metric']}: " + ", ".join(
            f"{name} {value:.3f}" for name, value in v.items()))
        typer.echo(f"ensemble of {' + '.join(s['members'])} written to {result.folder} (chosen by {s['chosen_by']}"
                   f"{scores})"
                   + (f"; test accuracy {100 * s['test']['accuracy']:.2f}%" if s["test"] else ""))

    run_command(action)


@app.command()
def hybrid(
    run_dir: Path = typer.Argument(..., help="a single-label run folder, or an ensemble folder (`longbert ensemble`)"),
    output: Optional[Path] = typer.Option(None, "--output", help="where the hybrid goes (default: RUN/hybrid; an "
                                          "older hybrid there is replaced)"),
):
    """Make a hybrid of the run's model (an ensemble's members' mean) and TF-IDF over the same token ids: fitted on
    the run's training documents, mixed at a weight chosen on its validation split; a folder predict and serve take."""
    from longbert.ensembles.hybrid import make_hybrid

    def action():
        result = make_hybrid(run_dir, output)
        s, v = result.metrics, result.metrics["validation"]
        typer.echo(f"hybrid written to {result.folder}: neural weight {s['mix']:.2f}, C {s['C']} (chosen on "
                   f"{s['validation_documents']} validation documents: neural {100 * v['neural_accuracy']:.1f}%, "
                   f"TF-IDF {100 * v['lexical_accuracy']:.1f}%, hybrid {100 * v['hybrid_accuracy']:.1f}%)"
                   + (f"; test accuracy {100 * s['test']['accuracy']:.2f}%" if "test" in s else ""))

    run_command(action)


@app.command()
def strategies():
    """List the registered strategies and their recipe fields; `longbert export` takes those marked [exportable]."""
    from longbert.strategies.base import ReadsWindows, config_fields
    from longbert.strategies.registry import get_entry, strategy_names

    def action():
        for name in strategy_names():
            entry = get_entry(name)
            exportable = " [exportable]" if issubclass(entry.module_cls, ReadsWindows) else ""
            typer.echo(f"{name:<12} {entry.summary}{exportable}")
            for f in config_fields(entry.config_cls):
                default = f.default if f.default is not f.default_factory else f.default_factory()  # type: ignore
                typer.echo(f"    {f.name} (default {json.dumps(default)}): {f.metadata.get('help', '')}")

    run_command(action)


@app.command()
def compare(
    strategies: str = typer.Option(..., "--strategies", help="comma-separated strategy names, e.g. "
                                                             "truncate,chunk,sliding (see `longbert strategies`)"),
    recipe: Optional[Path] = typer.Option(None, "--recipe", help="base recipe file or packaged recipe name "
                                                                 "(default: recipes/compare/own_data.yaml with --set "
                                                                 "data.path, else recipes/compare/imdb.yaml: IMDb)"),
    set_: List[str] = typer.Option([], "--set", help="key.path=value for every strategy; strategy.<field>=value for "
                                                     "those with that field; <strategy>.<field>=value for one "
                                                     "(repeatable)"),
    name: Optional[str] = typer.Option(None, "--name", help="report name: reports/<name>/ and runs/compare/<name>/ "
                                                            "(default: compare_<stem> of data.path, or the recipe's)"),
    runs_dir: Path = typer.Option(Path("runs/compare"), "--runs-dir", help="where the run folders go "
                                                                           "(<runs-dir>/<name>/<strategy>/)"),
    reports_dir: Path = typer.Option(Path("reports"), "--reports-dir", help="where the report goes "
                                                                           "(<reports-dir>/<name>/)"),
    seeds: int = typer.Option(1, "--seeds", help="runs per strategy, at the recipe's seed and the next ones, on the "
                                                 "same documents; above 1: each strategy's seeds averaged, their "
                                                 "mean ± sd, and every run a candidate for the ensemble"),
    train_sizes: Optional[str] = typer.Option(None, "--train-sizes", help="a learning curve, e.g. 100,300,1000: a "
                                              "compare per size on nested training subsets, one report over them"),
):
    """Train and evaluate several strategies on the same data and budget; write one report comparing them."""
    from longbert.comparison.learning_curve import curve_command
    from longbert.comparison.orchestrator import compare as run_compare
    from longbert.comparison.render import print_summary

    def action():
        check_counts({"--seeds": seeds})
        if train_sizes is not None:
            return curve_command(strategies, train_sizes, recipe, set_, name, runs_dir, reports_dir, command_line(),
                                 seeds)
        result = run_compare(strategies, recipe, set_, name, runs_dir=runs_dir, reports_dir=reports_dir,
                             command=command_line(), seeds=seeds)
        print_summary(result.metrics)

    run_command(action)


@app.command()
def report(
    folders: List[Path] = typer.Argument(..., help="report folders that `longbert compare` wrote (reports/<name>)")):
    """Render compare reports again from their results.json with this version's pages and plots (numbers kept)."""
    from longbert.comparison.render import render_again

    def action():
        for folder in folders:
            render_again(folder)
            typer.echo(f"rendered again: {folder}/ (report.md, report.html, results.json)")

    run_command(action)


classic_metavars(app)  # after every command is declared

if __name__ == "__main__":  # `python -m longbert.cli` and `accelerate launch -m longbert.cli`
    app()
