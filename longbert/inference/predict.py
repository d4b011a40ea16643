"""`longbert predict`: reading the documents, running a saved model over them, and writing its JSON lines.

Inputs: '-' (stdin) and any file that is not a data file are one text per line, split on '\\n' only (a trailing '\\r'
is dropped, blank lines are skipped), so a text holding U+2028 or a form feed stays one text. csv, jsonl, json(.gz),
parquet files, save_to_disk folders, folders of <split> files and hub ids are read through datasets
(longbert.data.sources.load_table), and the texts come from one of their columns.

Every input problem is found before the model loads: a missing input, a line that is not UTF-8 or a row that is
not JSON, a missing column (named with those there are), a text that is empty or not a string, an output (or
--explain page) that cannot be written there. The rows are written before the --explain page, so that a page that
cannot be written loses no row.

Corpus scale: documents go through the model in blocks of `BATCHES_PER_BLOCK` batches per process; within a block
they are batched by length, and every row is written (and flushed) as soon as all rows before it in the input are.
Under `accelerate launch` or torchrun each block is split between the processes and gathered back; only the main
process writes.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, TextIO

import pyarrow.compute as pc
from accelerate.utils import gather_object
from datasets import Dataset

from longbert.data.documents import count_cut
from longbert.data.files import is_data_file, load_table, text_lines
from longbert.errors import LongbertError
from longbert.inference.explain import explained, page_path, write_page
from longbert.inference.exported import ExportedClassifier
from longbert.inference.openvino_runtime import OpenVINOModel, check_export_runtime, check_runtime, openvino_precision
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.reads_texts import check_min_confidence
from longbert.utils.atomic import atomic_stream
from longbert.utils.destinations import writable_destination
from longbert.utils.folders import BEST, CONFIG_FILE, EXPORT_FILE
from longbert.utils.hardware import check_precision, process_state
from longbert.utils.progress import progress

BATCHES_PER_BLOCK = 64  # documents sorted by length together: this many batches per process
PREDICTION_FIELDS = ("label", "labels", "abstained", "probabilities", "n_tokens")  # what the model writes into each row
LINES_COLUMN = "text"  # the one column of a text-per-line input


@dataclass
class Prediction:
    """What `predict_file` did: how many documents it predicted, how many of them the token cap cut, and with a
    minimum confidence how many it abstained on."""

    documents: int
    cut: int
    cap: int
    main_process: bool = True  # False on the other processes of a multi-process run: the main one reports
    abstained: int | None = None  # None: no minimum confidence was asked for
    min_confidence: float | None = None
    runtime: str | None = None  # what read them, when it was not PyTorch or an exported folder

    def cut_message(self) -> str | None:
        """The line that says how many texts were cut; None when none was, or on a process other than the main one."""
        if not self.cut or not self.main_process:
            return None
        return f"{self.cut} of {self.documents} documents were cut at max_document_tokens={self.cap}"

    def report(self) -> str | None:
        """What predict says on stderr when it is done: the cut line, and with a minimum confidence how many documents
        it abstained on (every time, 0 too); None when there is nothing to say or on another process than the main."""
        lines = [self.cut_message(), self.runtime if self.main_process else None]
        if self.abstained is not None and self.main_process:
            lines.append(f"{self.abstained} of {self.documents} documents abstained (confidence below "
                         f"--min-confidence {self.min_confidence:g}): 'abstained': true, no label")
        return "\n".join(line for line in lines if line) or None


def read_texts(source: str) -> list[str]:
    """'-' -> stdin lines; a file -> one text per line. Blank lines are skipped; an empty result is an error, and so
    is a line that is not UTF-8, named by its line number."""
    if source == "-":
        return _lines(text_lines(sys.stdin.buffer, "stdin"), "stdin")
    path = Path(source)
    with open(path, "rb") as stream:
        return _lines(text_lines(stream, str(path)), str(path))


def _lines(lines: Iterator[tuple[int, str]], where: str) -> list[str]:
    texts = [line for _, line in lines if line.strip()]
    if not texts:
        raise LongbertError(f"{where} holds no texts")
    return texts


def read_documents(source: str, text_column: str = "text", id_column: str | None = None, keep: tuple[str, ...] = (),
                   split: str | None = None):
    """The documents of `source` as a datasets.Dataset holding at least `text_column`, `id_column` and the `keep`
    columns (see the module's docstring for what `source` may be; `split` picks one split of a source that holds
    several). Every text must be a non-empty string. Problems -> one LongbertError naming the input and the column
    or row."""
    path = Path(source).expanduser()
    if source == "-" or (path.is_file() and not is_data_file(path)):
        if split is not None:
            raise LongbertError(f"--split {split}: {'stdin' if source == '-' else path} is one text per line, "
                                "with no splits")
        documents = Dataset.from_dict({LINES_COLUMN: read_texts(source)})
        where = "stdin" if source == "-" else str(path)
        hint = f" (one text per line, read as the column {LINES_COLUMN!r})"
    elif path.exists() or path.suffix or source.startswith((".", "/", "~")):
        if not path.exists():
            raise LongbertError(f"input file not found: {path}")
        documents, where = load_table(str(path), split), str(path)
        hint = (" (a .csv file is a table whose first line names the columns; for one text per line, name it .txt)"
                if path.name.lower().endswith((".csv", ".csv.gz")) else "")
    else:
        documents, where = load_table(source, split), repr(source)
        hint = ""
    wanted = [("--text-column", text_column)] + ([("--id-column", id_column)] if id_column else [])
    wanted += [("--keep", column) for column in keep]
    for option, column in wanted:
        if column not in documents.column_names:
            raise LongbertError(f"{option} {column}: {where} has no column {column!r}; its columns: "
                                f"{', '.join(map(repr, documents.column_names))}"
                                f"{hint if option == '--text-column' else ''}")
    for column in keep:
        if column in PREDICTION_FIELDS or column == "id":
            raise LongbertError(f"--keep {column}: every output row has its own {column!r} field; "
                                "keep another column")
    if len(documents) == 0:
        raise LongbertError(f"{where} holds no rows")
    _check_texts(documents, text_column, where)
    return documents


def _check_texts(documents, column: str, where: str) -> None:
    """Every value of `column` is a string that is not blank, else a LongbertError naming the first bad row."""
    if getattr(documents.features[column], "dtype", None) in ("string", "large_string"):
        values = documents.with_format("arrow")[column]
        blank = pc.or_kleene(pc.is_null(values), pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0))
        first = pc.index(blank, True).as_py()
        if first >= 0:
            raise LongbertError(f"{where} row {first + 1}: the text (column {column!r}) is empty, whitespace-only "
                                "or missing")
        return
    for number, value in enumerate(documents[column], 1):  # not a string column: find the first value that is no text
        if not isinstance(value, str) or not value.strip():
            what = ("empty or whitespace-only" if isinstance(value, str)
                    else f"not a string ({type(value).__name__} {value!r})")
            raise LongbertError(f"{where} row {number}: the text (column {column!r}) is {what}")


def check_output(output: Path | None, source: str | Path | None = None, model_dir: str | Path | None = None,
                 what: str = "--output") -> None:
    """Refuse an output path that cannot be written (down to writing a probe file beside it), that is the command's
    input file `source`, or that lies in the folder of the model it reads (`model_dir`'s best/, a model folder or an
    exported one), before any work is done: written, the output would replace the texts it was to predict, or the
    model. A run folder's other files are fair game (predictions beside the run's own). `what`: the option named."""
    if output is None:
        return
    if output.is_dir():
        raise LongbertError(f"{what} {output} is a folder; name a file in it")
    target = output.expanduser().resolve()
    if source not in (None, "-") and target == Path(source).expanduser().resolve():
        raise LongbertError(f"{what} {output} is the input {source}, which this command reads; name another file")
    folder = model_files(model_dir)
    if folder is not None and folder in target.parents:
        raise LongbertError(f"{what} {output} is inside the model folder {folder}, which this command reads; name "
                            "a file outside it")
    writable_destination(output, what)  # a missing folder, named directly or through a symlink, is refused


def model_files(model_dir: str | Path | None) -> Path | None:
    """The resolved folder that holds a model's files: a run folder's best/, a model folder, an exported folder; None
    for anything else (a hub id, a folder that is none of these)."""
    if model_dir is None:
        return None
    path = Path(model_dir).expanduser()
    for folder in (path / BEST, path):
        if (folder / CONFIG_FILE).is_file() or (folder / EXPORT_FILE).is_file():
            return folder.resolve()
    return None


def predict_file(model_dir: str | Path, source: str, output: Path | None = None, batch_size: int = 16,
                 text_column: str = "text", id_column: str | None = None, keep: tuple[str, ...] = (),
                 precision: str = "auto", split: str | None = None, explain: str | Path | None = None,
                 calibrated: bool = True, min_confidence: float | None = None, runtime: str = "torch") -> Prediction:
    """Predict a label for each document of `source` (see `read_documents`) with the model in `model_dir` (a run
    folder or a saved model folder, on the accelerator when there is one; or an exported folder, in onnxruntime), and
    write one JSON line per document to `output` (None: stdout), in input order, each as soon as it and every row
    before it are done. A row holds `id` (the `id_column` value, else the row number from 0), the `keep` columns, then
    the prediction (label or labels, probabilities, n_tokens). `precision`: auto, fp32, bf16 or int8 (auto only for an
    exported folder, which runs at the precision it was exported with).
    Inputs and the output path are checked before the model loads; the output file is written under a temporary
    name beside it and renamed when complete, so it appears whole or not at all.
    Under `accelerate launch` / torchrun the documents are split between the processes and the main process writes
    them all, in input order. `explain`: an .html file or a folder; rows also say how much each unit weighed and
    which decided, and an HTML page shows it (longbert/inference/explain.py; one process only).
    `calibrated=False`: the probabilities the model's logits give, its calibration taken off (`without_calibration`).
    `min_confidence` (in (0, 1)): a document whose confidence is below it is answered 'abstained': true with no label
    (`longbert.modeling.reads_texts.with_abstention`); the others 'abstained': false. `runtime`: torch, or openvino (the
    backbone's passes in OpenVINO on the CPU: longbert/inference/openvino_runtime.py)."""
    check_min_confidence(min_confidence, "--min-confidence")
    page, process, exported = _check_options(model_dir, source, output, batch_size, precision, explain, runtime)
    documents = read_documents(source, text_column, id_column, tuple(keep), split)
    model = load_model(model_dir, exported, precision, runtime, process.device)
    if not calibrated:
        model.without_calibration()
    rows = rows_in_input_order(model, documents, process, batch_size, precision, text_column, id_column, tuple(keep),
                               partial(model.predictions_as_done, min_confidence=min_confidence))
    shown: list = []  # what the --explain page shows, written once the rows are safe
    if page is not None:
        rows = explained(model, documents[text_column], rows, shown, precision)
    cut, abstained = _write_rows(rows, output, process, model, len(documents))
    if page is not None:  # after the rows file is complete: a page that cannot be written loses no row
        write_page(page, shown, model.tokenizer, f"longbert predict --explain: {model_dir}",
                   "the rows were written to stdout" if output is None else f"the rows were kept at {output}")
    return Prediction(len(documents), cut, model.settings.max_document_tokens, process.is_main_process,
                      None if min_confidence is None else abstained, min_confidence,
                      f"read with OpenVINO ({model.precision})" if runtime == "openvino" else None)


def load_model(model_dir: str | Path, exported: bool, precision: str, runtime: str, device):
    """The model predict reads with: an exported folder in onnxruntime (on the CPU, at the precision it was exported
    with); a PyTorch model on `device` (int8: on the CPU), or with `runtime` openvino its backbone's passes in
    OpenVINO on the CPU."""
    if exported:
        return ExportedClassifier(model_dir)
    model = LongDocumentClassifier.from_pretrained(model_dir)
    if runtime == "openvino":
        return OpenVINOModel(model, precision)
    return model.to("cpu" if precision == "int8" else device)


def _check_options(model_dir: str | Path, source: str, output: Path | None, batch_size: int, precision: str,
                   explain: str | Path | None, runtime: str = "torch"):
    """The checks `predict_file` makes before reading the documents. Returns (the --explain page's path or None,
    this process's state, whether `model_dir` is an exported folder)."""
    if batch_size < 1:
        raise LongbertError(f"--batch-size must be >= 1, got {batch_size}")
    check_precision(precision, "--precision")
    if output is not None and output.suffix.lower() in (".csv", ".tsv", ".parquet"):
        raise LongbertError(f"--output {output}: predict writes JSON lines, not a {output.suffix} table; name a .jsonl "
                            "file (pandas.read_json(path, lines=True) reads it)")
    check_runtime(runtime)
    if runtime == "openvino":
        openvino_precision(precision)  # refuses int8 before anything loads
        if explain is not None:
            raise LongbertError("--explain reads with --runtime torch (it reads inside the PyTorch model); predict "
                                "without --runtime openvino to explain")
    check_output(output, source, model_dir)
    page = None
    if explain is not None:
        page = page_path(explain)
        check_output(page, source, model_dir, "--explain")  # the page replacing the texts, or written in the model
        if output is not None and page.resolve() == output.expanduser().resolve():
            raise LongbertError(f"--explain {explain} is the --output file too, which the page would replace; name "
                                "another file for the page")
    process = process_state()  # which process this is, and its device (`accelerate launch` starts one per device)
    if source == "-" and process.num_processes > 1:
        raise LongbertError("stdin reaches only one process; give the input as a file to predict with several")
    if page is not None and process.num_processes > 1:
        raise LongbertError("--explain runs in one process; predict without accelerate launch or torchrun")
    exported = check_export_runtime(model_dir, precision, runtime)
    if exported:
        if page is not None:
            raise LongbertError(f"--explain needs a PyTorch model folder; {model_dir} is an exported folder")
    return page, process, exported


def _write_rows(rows: Iterator[dict], output: Path | None, process, model, total: int) -> tuple[int, int]:
    """Run through the rows (on every process); the main process writes each as a JSON line to `output` (None:
    stdout, else a file written atomically) and flushes it. Returns how many documents the token cap cut, and how
    many were abstained on."""
    cut = abstained = 0
    with _output_stream(output) if process.is_main_process else nullcontext() as stream:
        if process.is_main_process:
            rows = progress(rows, "predicting", total=total)
        for row in rows:  # every process runs through its rows (each block is gathered by all of them)
            cut += count_cut([row["n_tokens"]], model.settings.max_document_tokens)
            abstained += bool(row.get("abstained"))
            if stream is not None:
                stream.write(json.dumps(row, default=str) + "\n")
                stream.flush()
    return cut, abstained


def rows_in_input_order(model, documents, process, batch_size: int, precision: str, text_column: str = "text",
                        id_column: str | None = None, keep: tuple[str, ...] = (),
                        read: Callable | None = None) -> Iterator[dict]:
    """The output rows (see `predict_file`) of every document, in input order, on every process. Blocks of
    `BATCHES_PER_BLOCK` batches per process are split between the processes (`process`: accelerate's PartialState);
    each process predicts its contiguous share, longest documents first, and the shares are gathered. A row comes out
    as soon as every row before it has. `read(texts, batch_size, precision)` gives (index, fields) pairs out of order
    (default: `model.predictions_as_done`; `longbert embed` reads embeddings)."""
    read = read or model.predictions_as_done
    per_block = batch_size * BATCHES_PER_BLOCK * process.num_processes
    texts_of = documents.select_columns([text_column])  # reading a block's rows reads only the columns needed
    carried = documents.select_columns(([id_column] if id_column else []) + list(keep))
    waiting: dict[int, dict] = {}  # finished rows whose predecessors are not all finished yet
    next_row = 0
    for start in range(0, len(documents), per_block):
        block = list(range(start, min(start + per_block, len(documents))))
        with process.split_between_processes(block) as share:
            mine = list(share)
        texts = texts_of[mine[0] : mine[-1] + 1][text_column] if mine else []
        done = ((mine[i], row) for i, row in read(texts, batch_size, precision))
        if process.num_processes > 1:
            done = gather_object(list(done))  # every process's (index, row) pairs, to every process
        columns = carried[block[0] : block[-1] + 1]
        for index, prediction in done:
            waiting[index] = prediction
            while next_row in waiting:
                at = next_row - block[0]
                row = {"id": columns[id_column][at] if id_column else next_row}
                row.update({column: columns[column][at] for column in keep})
                row.update(waiting.pop(next_row))
                yield row
                next_row += 1


@contextmanager
def _output_stream(output: Path | None) -> Iterator[TextIO]:
    if output is None:
        yield sys.stdout
        return
    with atomic_stream(output) as stream:
        yield stream
