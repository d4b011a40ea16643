"""`longbert evaluate` and `longbert.evaluate`: a model's metrics on documents, two ways. A finished run's kept model
on one split of its own data (`evaluate_run`), written into the run folder (training writes the same files for its
test split): metrics as JSON and as a Markdown page (its reliability diagram beside it, and a PNG heatmap of the
confusion matrix when there are many classes) and one prediction row per document. Or a model (a
LongDocumentClassifier, or a saved model folder) on documents in memory or in a data file (`evaluate_model`), which
writes nothing unless asked to."""

from __future__ import annotations

import copy
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from datasets import Dataset

from longbert.config import DataConfig, EvalConfig, load_recipe, parse_override
from longbert.data.carving import check_file_unchanged
from longbert.data.documents import check_text_column, load_corpus, tokenize_cached
from longbert.data.files import file_kind, load_table
from longbert.data.labels import check_labels_present, encode_labels
from longbert.data.objects import data_object_splits
from longbert.data.sources import row_places
from longbert.errors import LongbertError
from longbert.evaluation.metrics import MANY_CLASSES, multi_label_predictions, top_confusions
from longbert.evaluation.plots import confusion_matrix_png, reliability_diagram_png
from longbert.evaluation.predictions import PredictionRow, write_prediction_rows
from longbert.evaluation.split_pass import evaluate_split
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.utils.atomic import write_bytes_atomically, write_json, write_text_atomically
from longbert.utils.destinations import locked
from longbert.utils.folders import (
    CONFIG_FILE,
    RunFolder,
    confusion_file,
    metrics_file,
    predictions_file,
    reliability_beside,
)
from longbert.utils.hardware import check_precision, process_state
from longbert.utils.outputs import atomic_folder, replaceable_folder

EVALUATE_SECTIONS = ("data", "eval")  # what `evaluate --set` may change: the rest describes how the run was trained
OVERRIDDEN = "with-overrides"  # the file names' tag for an evaluation of other documents than the run's own
UNCALIBRATED = "uncalibrated"  # the file names' tag for an evaluation with the model's calibration off
DOCUMENTS = "documents"  # what the files of a model's evaluation (in `output`) are named after, and its rows' split


def evaluation_name(split: str, overrides: list[str] | tuple[str, ...] = (), calibrated: bool = True) -> str:
    """What an evaluation's files are named after: metrics-<name>.json/.md, predictions-<name>.jsonl and
    confusion-matrix-<name>.png. The split's own name, unless `overrides` change the data section ('<split>-with-
    overrides') or the calibration is off ('<split>-uncalibrated', after that), beside the run's own files. Why: hybrid
    and compare read predictions-<split>.jsonl as the run's kept model's predictions of its own documents; an
    evaluation of other documents (data.max_eval_documents=20), or of another model, must not replace it."""
    changes_data = any(parse_override(text)[0][0] == "data" for text in overrides)
    name = f"{split}-{OVERRIDDEN}" if changes_data else split
    return name if calibrated else f"{name}-{UNCALIBRATED}"


def evaluation_page(run_dir: Path, split: str, overrides: list[str], calibrated: bool) -> str:
    """Where `longbert evaluate` wrote its page, and why beside the run's own files when it was not the run's own."""
    other = ([] if evaluation_name(split, overrides) == split else ["other documents than the run's"]) + (
        [] if calibrated else ["the model's calibration off"])
    kept = f" ({' and '.join(other)}: its own {split} files are kept)" if other else ""
    return f"{run_dir}/metrics-{evaluation_name(split, overrides, calibrated)}.md{kept}"


def evaluate(model: str | Path | LongDocumentClassifier, split: Any = None, batch_size: int | None = None,
             overrides: list[str] | tuple[str, ...] = (), data: Any = None, precision: str = "auto",
             output: str | Path | None = None, calibrated: bool = True) -> dict:
    """A model's metrics on documents (a dict: accuracy, macro_f1, per_class, by_length, confusion_matrix, speed...),
    one of two ways:

        evaluate(run_folder, split="test")  a finished run's kept model on one split of the run's own data (train,
            validation or test), as `longbert evaluate` does; `overrides` ("data.max_eval_documents=100") change its
            data and eval sections, `data` is the object in memory the run was trained on (`train(data=...)`). Writes
            its files into the run folder (see `evaluate_run`).
        evaluate(model, documents)  a LongDocumentClassifier, or a saved model folder, on documents: in memory (a
            datasets.Dataset, a pandas DataFrame, (texts, labels), rows, columns) or a data file (csv, tsv, jsonl,
            json(.gz), parquet; a folder of split files or a save_to_disk folder with one split), given second or as
            `data`; columns text and label. Writes nothing unless `output` names a folder (see `evaluate_model`).

    `batch_size`: documents per inference step (default: the run's eval.batch_size; 32). `precision`: auto, fp32,
    bf16 or int8 (`longbert.utils.hardware.INFERENCE_PRECISIONS`); the metrics record it. `calibrated=False`: the
    model's probabilities without its calibration (`without_calibration`)."""
    if isinstance(model, LongDocumentClassifier) or is_model_folder(model):
        if overrides:
            raise LongbertError("overrides change a run's recipe; evaluate(model, documents) reads no recipe: give "
                                "the documents as they should be read")
        if split is not None and data is not None:
            raise LongbertError("evaluate: the documents are given twice (second, and as data=); give them once")
        return evaluate_model(model, data if data is not None else split, batch_size, precision, output, calibrated)
    if output is not None:
        raise LongbertError(f"output: {model} is evaluated as a run folder, which holds its evaluations; output is "
                            "for evaluate(model, documents)")
    split = "test" if split is None else split
    if not isinstance(split, str):
        raise LongbertError(f"split: a run folder is evaluated on one of its splits (train, validation, test), got a "
                            f"{type(split).__name__}; to evaluate its model on other documents, pass its best/ folder: "
                            f"evaluate('{RunFolder(model).best}', documents)")
    return evaluate_run(model, split, batch_size, overrides, data, precision, calibrated)


def is_model_folder(path: Any) -> bool:
    """Whether `path` names a saved model folder (one that is not a run folder: a run is evaluated on its splits)."""
    return (isinstance(path, (str, Path)) and not RunFolder(path).is_run()
            and (Path(path).expanduser() / CONFIG_FILE).is_file())


def evaluate_run(run_dir: str | Path, split: str = "test", batch_size: int | None = None,
                 overrides: list[str] | tuple[str, ...] = (), data: Any = None, precision: str = "auto",
                 calibrated: bool = True) -> dict:
    """Evaluate a finished run's kept model on one split of the run's own data (as its recipe describes, with
    `key.path=value` overrides of its data and eval sections, e.g. "data.max_eval_documents=100"); only that split
    is tokenized. Writes metrics-<name>.json/.md, reliability-diagram-<name>.png and predictions-<name>.jsonl into
    the run folder (and, with many classes, confusion-matrix-<name>.png), where <name> is the split's, or
    <split>-with-overrides when `overrides` change the data (`evaluation_name`: the run's own files are left as they
    were); returns the metrics.
    `data`: the object in memory the run was trained on (`train(recipe, data=...)`), needed again for such a run."""
    run = RunFolder(Path(run_dir))
    if not run.is_run():
        raise LongbertError(f"{run.path} is not a longbert run folder (no {run.recipe.name})")
    for text in overrides:
        keys, _ = parse_override(text)
        if keys[0] not in EVALUATE_SECTIONS or len(keys) < 2:
            raise LongbertError(f"override {text!r}: evaluate can change only the "
                                f"{' and '.join(EVALUATE_SECTIONS)} sections of a finished run's recipe")
    check_precision(precision, "--precision")
    process = process_state()  # which process this is, and its device (`accelerate launch` starts one per device)
    # Not while a training writes the folder; only the main process writes, so only it holds the lock.
    with locked(run.path) if process.is_main_process else nullcontext():
        recipe = load_recipe(run.recipe, overrides)
        check_file_unchanged(run.path, f"evaluate {run.path}", recipe.data.path)
        available = ["train", "validation"] + (["test"] if recipe.data.test_split else [])
        if split not in available:
            raise LongbertError(f"split {split!r} is not in this run's data; available: {', '.join(available)}")
        model = LongDocumentClassifier.from_pretrained(run.path).to(process.device)
        if not calibrated:
            model.without_calibration()
        corpus = load_corpus(recipe.data, model.tokenizer, recipe.seed, model.multi_label, source=data, roles=[split])
        if split not in corpus.splits:
            raise LongbertError(f"split {split!r} is not in this run's data; available: {', '.join(corpus.splits)}")
        dataset = corpus.splits[split]
        metrics, raw = evaluate_split(model, dataset, batch_size or recipe.eval.batch_size,
                                      description=f"evaluating {split}", process=process, precision=precision)
        metrics["precision"] = precision
        if process.is_main_process:
            name = evaluation_name(split, overrides, calibrated)
            title = (f"{recipe.name}: {split}" + (f" (with {', '.join(overrides)})" if OVERRIDDEN in name else "")
                     + (" (calibration off)" if not calibrated else ""))
            write_evaluation(run.path, name, title, metrics, raw, dataset, model)
    return metrics


def evaluate_model(model: str | Path | LongDocumentClassifier, documents: Any, batch_size: int | None = None,
                   precision: str = "auto", output: str | Path | None = None, calibrated: bool = True) -> dict:
    """A model (a LongDocumentClassifier, run where it is; or a saved model folder, loaded onto this process's
    device) on `documents` (see `documents_to_evaluate`) -> the metrics. Writes nothing, unless `output` names a
    folder: then metrics-documents.json/.md, reliability-diagram-documents.png and predictions-documents.jsonl there
    (and, with many classes, confusion-matrix-documents.png), written as every output folder is (utils/outputs.py):
    the folder must be new, empty or an earlier evaluation's (checked before any work), and only that evaluation's
    own files are replaced."""
    check_precision(precision, "precision")
    if documents is None:
        raise LongbertError("evaluate: no documents to evaluate the model on; give them: evaluate(model, documents)")
    marker = metrics_file(DOCUMENTS)  # what says a folder holds an earlier evaluation of documents
    folder = None if output is None else replaceable_folder(output, marker, "output")
    process = process_state()
    if not isinstance(model, LongDocumentClassifier):
        model = LongDocumentClassifier.from_pretrained(model).to(process.device)
    if not calibrated:  # a shallow copy: the caller's model keeps its calibration, the weights are shared
        model = copy.copy(model).without_calibration()
    dataset = documents_to_evaluate(model, documents)
    metrics, raw = evaluate_split(model, dataset, batch_size or EvalConfig().batch_size, description="evaluating",
                                  process=process, precision=precision)
    metrics["precision"] = precision
    if folder is not None and process.is_main_process:
        with atomic_folder(folder, marker, "output") as staging:
            write_evaluation(staging, DOCUMENTS, f"{len(dataset)} documents", metrics, raw, dataset, model)
    return metrics


def documents_to_evaluate(model: LongDocumentClassifier, documents: Any) -> Dataset:
    """Documents with labels -> a tokenized split as training's (text, input_ids, labels, n_tokens; id when the
    documents have an `id` column), labels read as the model's classes, each document cut at the model's token cap.
    `documents`: a path (a data file, a folder of one split file or a save_to_disk folder, read as `longbert predict`
    reads its input) or one split in memory (as `train(train_dataset=...)` takes it). Every problem is one
    LongbertError naming the row (a file's line)."""
    config = DataConfig(label_names=list(model.label_names), max_document_tokens=model.settings.max_document_tokens)
    if isinstance(documents, (str, Path)):
        local = Path(documents).expanduser()
        if not local.exists() and (isinstance(documents, Path) or file_kind(local) is not None):
            raise LongbertError(f"data: {documents} does not exist")  # a file's name, never a hub id
        table = load_table(str(documents), where="data")
        place = row_places(local if local.is_file() else None, DOCUMENTS)
    else:
        splits, kind, single = data_object_splits(documents, config)
        if not single:
            raise LongbertError(f"data: a {kind}: evaluate(model, documents) takes one split's documents; pass one")
        table, place = splits[config.train_split], row_places(None, DOCUMENTS)
    if len(table) == 0:
        raise LongbertError("data: there are no documents to evaluate")
    check_text_column(table, config.text_column, DOCUMENTS, place)
    if config.label_column not in table.column_names:
        raise LongbertError(f"data: no column {config.label_column!r} of labels, which evaluating needs; columns: "
                            f"{', '.join(table.column_names)}")
    values = list(table[config.label_column])
    check_labels_present(values, model.multi_label, place)
    texts = list(table[config.text_column])
    ids, lengths = tokenize_cached(model.tokenizer, texts, config.max_document_tokens)
    columns = {"text": texts, "input_ids": ids, "labels": encode_labels(values, model.label_names, model.multi_label,
                                                                        place), "n_tokens": lengths}
    if config.id_column in table.column_names:  # document ids travel to the prediction file
        columns["id"] = list(table[config.id_column])
    return Dataset.from_dict(columns)


def write_evaluation(folder: Path, name: str, title: str, metrics: dict, raw: dict, dataset,
                     model: LongDocumentClassifier) -> None:
    """An evaluation's files in `folder`, named after `name`: metrics-<name>.json and .md (beside the page,
    reliability-diagram-<name>.png and, with many classes, confusion-matrix-<name>.png) and predictions-<name>.jsonl."""
    write_json(folder / metrics_file(name), metrics)
    write_text_atomically(folder / metrics_file(name, "md"),
                          metrics_markdown(metrics, model.label_names, title, folder / confusion_file(name)))
    write_predictions(folder / predictions_file(name), dataset, raw, model.label_names, model.multi_label,
                      model.thresholds if model.multi_label else None)


def write_predictions(path: Path, dataset, raw: dict, label_names: list[str], multi_label: bool,
                      thresholds: list[float] | None = None) -> None:
    """One JSON line per document (for error analysis): its id (the dataset's `id` column, else the row index), label
    and prediction as indices and as names (label_name, predicted_label; lists of names for multi-label, predicted
    at `thresholds`, 0.5 by default), probabilities (and, for a calibrated model, those before its calibration),
    length, unit weights."""
    n_tokens = list(dataset["n_tokens"])
    ids = list(dataset["id"]) if "id" in dataset.column_names else range(len(dataset))
    predicted = (multi_label_predictions(raw["probabilities"], thresholds) if multi_label
                 else raw["probabilities"].argmax(1))
    rows = []
    for i, (probs, label, guess) in enumerate(zip(raw["probabilities"], raw["labels"], predicted)):
        if multi_label:
            names = lambda hot: [n for n, h in zip(label_names, hot) if h]
            label_name, predicted_label = names(label), names(guess)
        else:
            label_name, predicted_label = label_names[int(label)], label_names[int(guess)]
        rows.append(PredictionRow(
            index=i, id=ids[i], n_tokens=int(n_tokens[i]), label=label.tolist(), label_name=label_name,
            probabilities=[float(p) for p in probs], predicted=guess.tolist() if multi_label else int(guess),
            predicted_label=predicted_label,
            unit_weights=raw["unit_weights"][i] if i < len(raw["unit_weights"]) else None,
            uncalibrated=[float(p) for p in raw["uncalibrated"][i]] if "uncalibrated" in raw else None))
    write_prediction_rows(path, rows)


def metrics_markdown(metrics: dict, label_names: list[str], title: str, plot_path: str | Path | None = None) -> str:
    """A short human-readable page for one split's metrics. With more than MANY_CLASSES classes (single-label) the
    page shows the top confusions instead of the whole matrix; given `plot_path`, the whole matrix is written
    there (atomically) as a PNG heatmap and linked from the page by its file name (keep it beside the page), and the
    reliability diagram beside it (`reliability_beside`)."""
    lines = [f"# {title}", "", f"- documents: {metrics['documents']}"]
    multi_label = "exact_match" in metrics
    if multi_label:
        thresholds = sorted(set(metrics["thresholds"]))
        per_label = ", ".join(f"{n} {t:.4f}" for n, t in zip(label_names, metrics["thresholds"]))
        lines += [f"- exact match (every label right): {metrics['exact_match']:.4f}",
                  f"- micro-F1: {metrics['micro_f1']:.4f}", f"- macro-F1: {metrics['macro_f1']:.4f}",
                  f"- Hamming loss: {metrics['hamming_loss']:.4f}",
                  "- decision threshold: " + (f"{thresholds[0]:.4f}" if len(thresholds) == 1 else per_label)]
    else:
        lines += [f"- accuracy: {metrics['accuracy']:.4f}", f"- macro-F1: {metrics['macro_f1']:.4f}"]
    headline = "exact_match" if multi_label else "accuracy"
    speed = metrics.get("speed")
    if speed:
        lines.append(f"- inference: {speed['documents_per_second']:.2f} documents/s, "
                     f"{speed['tokens_per_second']:.0f} tokens/s, peak memory {speed['peak_memory_mb']} MB "
                     f"({speed['memory_kind']})")
    lines += calibration_markdown(metrics, title, None if plot_path is None else reliability_beside(plot_path))
    section = "Exact match" if multi_label else "Accuracy"
    lines += ["", f"## {section} by document length (WordPiece tokens with [CLS]/[SEP])", "",
              f"| length | documents | {headline.replace('_', ' ')} |", "|---|---|---|"]
    for name, row in metrics["by_length"].items():
        acc = "n/a" if row[headline] is None else f"{row[headline]:.4f}"
        lines.append(f"| {name} | {row['documents']} | {acc} |")
    lines += ["", "## Per class", "", "| class | precision | recall | F1 | support |", "|---|---|---|---|---|"]
    for name, row in metrics["per_class"].items():
        lines.append(f"| {name} | {row['precision']:.4f} | {row['recall']:.4f} | {row['f1']:.4f} "
                     f"| {row['support']} |")
    matrix = metrics["confusion_matrix"]
    if isinstance(matrix[0][0], list):  # multi-label: one 2x2 matrix per class, covered by the per-class table
        return "\n".join(lines) + "\n"
    if len(label_names) <= MANY_CLASSES:
        lines += ["", "## Confusion matrix (rows: true, columns: predicted)", "",
                  "| | " + " | ".join(label_names) + " |", "|---" * (len(label_names) + 1) + "|"]
        for name, row in zip(label_names, matrix):
            lines.append(f"| {name} | " + " | ".join(str(v) for v in row) + " |")
        return "\n".join(lines) + "\n"
    confusions = top_confusions(matrix, label_names)
    lines += ["", f"## Top confusions ({len(label_names)} classes; share: of the true class's documents)", ""]
    if confusions:
        lines += ["| true | predicted | documents | share |", "|---|---|---|---|"]
        lines += [f"| {c['true']} | {c['predicted']} | {c['count']} | {100 * c['share']:.1f}% |" for c in confusions]
    else:
        lines.append("No document was confused with another class.")
    if plot_path is not None:
        plot_path = Path(plot_path)
        png = confusion_matrix_png(matrix, label_names, f"{title} (rows: true, columns: predicted)")
        write_bytes_atomically(plot_path, png)
        lines += ["", f"![confusion matrix, rows: true, columns: predicted]({plot_path.name})"]
    return "\n".join(lines) + "\n"


COVERAGE_SHOWN = (0.5, 0.8, 0.9, 1.0)  # the shares of documents answered that a metrics page lists


def ece_table(heading: str, first: str, after: dict, before: dict | None, key: str) -> list[str]:
    """A page's table of ECE per entry of a calibration section's `key` (by_length, per_label), before and after the
    calibration where `before` is given, with each entry's documents where it counts them (none: left out)."""
    entries = after[key]
    counted = all("documents" in entry for entry in entries.values())
    columns = [first] + (["documents"] if counted else []) + (["ECE"] if before is None else ["ECE before",
                                                                                             "ECE after"])
    lines = ["", heading, "", "| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for name, entry in entries.items():
        if entry.get("documents", 1):
            values = ([before[key][name]["ece"]] if before else []) + [entry["ece"]]
            lines.append(f"| {name} | " + (f"{entry['documents']} | " if counted else "")
                         + " | ".join(f"{v:.4f}" for v in values) + " |")
    return lines


DIAGRAM_DOCUMENTS = 100  # fewer documents leave most of a reliability diagram's 15 bins empty or holding one or two


def calibration_markdown(metrics: dict, title: str, plot_path: Path | None = None) -> list[str]:
    """The page's Calibration section: ECE, NLL, Brier score and mean confidence (before and after the model's
    calibration, where it has one), ECE by length bucket, accuracy when only the surest documents are answered, and,
    given `plot_path`, the reliability diagram written there and linked. Nothing for metrics from before they held
    a calibration section."""
    after = metrics.get("calibration")
    if not after:
        return []
    before = after.get("uncalibrated")
    parts = [("before", before), ("after", after)] if before else [("value", after)]
    headline = "exact_match" if "exact_match" in metrics else "accuracy"
    said = headline.replace("_", " ")
    lines = ["", "## Calibration: how far its probabilities can be trusted", "",
             ("Before: the probabilities as the network gives them; after: as the model answers them, divided by the "
              "temperature fitted on validation." + (f" The temperature was {after['caveat']}.\n" if after.get(
                  "caveat") else "") if before else "The model has no calibration: its probabilities "
              "are the network's." + (f" Why: {after['why_none']}.\n" if after.get("why_none") else "")),
             "ECE: the mean gap between how sure the model was and how often it was right (15 confidence bins, "
             "weighted by documents; 0 is perfect). NLL and Brier score: lower is better.", "",
             "| measure | " + " | ".join(name for name, _ in parts) + " |", "|---" * (len(parts) + 1) + "|"]
    for key, name in (("ece", "ECE"), ("nll", "NLL"), ("brier", "Brier score")):
        lines.append(f"| {name} | " + " | ".join(f"{part[key]:.4f}" for _, part in parts) + " |")
    lines.append("| mean confidence | " + " | ".join(f"{part['mean_confidence']:.4f}" for _, part in parts) + " |")
    if headline == "accuracy":  # what the mean confidence should match (a multi-label one is per label, not this)
        lines.append("| accuracy | " + " | ".join(f"{metrics['accuracy']:.4f}" for _ in parts) + " |")
    lines += ece_table("ECE by document length:", "length", after, before, "by_length")
    if "per_label" in after:  # multi-label: each label's yes/no decisions
        lines += ece_table("ECE by label (its yes/no decisions):", "label", after, before, "per_label")
    lines += ["", f"Answering only the surest documents (the rest to a person): {said} on the documents answered, "
                  "and the confidence they reach.", "",
              f"| documents answered | {said} | confidence at least |", "|---|---|---|"]
    for share in COVERAGE_SHOWN:
        point = min(after["coverage"], key=lambda p: abs(p["coverage"] - share))
        lines.append(f"| {100 * point['coverage']:.0f}% ({point['answered']}) | {point['accuracy']:.4f} "
                     f"| {point['threshold']:.4f} |")
    if plot_path is not None and metrics["documents"] >= DIAGRAM_DOCUMENTS:
        write_bytes_atomically(plot_path, reliability_diagram_png({title: after}, columns=1))
        lines += ["", f"![reliability diagram: accuracy against confidence]({plot_path.name})"]
    elif plot_path is not None:
        lines += ["", f"No reliability diagram: {metrics['documents']} documents are too few to fill its bins (it "
                      f"is drawn from {DIAGRAM_DOCUMENTS})."]
    return lines
