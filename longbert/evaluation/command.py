"""`longbert evaluate`: a finished run's kept model on one split of its own data, and what evaluation writes into a
run folder (training writes the same files for its test split): metrics as JSON and as a Markdown page (a PNG
heatmap of the confusion matrix beside it when there are many classes) and one prediction row per document."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from longbert.errors import LongbertError
from longbert.evaluation.metrics import MANY_CLASSES, multi_label_predictions, top_confusions
from longbert.evaluation.predictions import PredictionRow, write_prediction_rows
from longbert.evaluation.split_pass import evaluate_split
from longbert.utils.atomic import write_bytes_atomically, write_json, write_text_atomically
from longbert.utils.hardware import process_state

EVALUATE_SECTIONS = ("data", "eval")  # what `evaluate --set` may change: the rest describes how the run was trained
OVERRIDDEN = "with-overrides"  # the file names' tag for an evaluation of other documents than the run's own


def evaluation_name(split: str, overrides: list[str] | tuple[str, ...] = ()) -> str:
    """What an evaluation's files are named after: metrics-<name>.json/.md, predictions-<name>.jsonl and
    confusion-matrix-<name>.png. The split's own name, unless `overrides` change the data section: then
    '<split>-with-overrides', beside the run's own files. Why: hybrid and compare read predictions-<split>.jsonl as
    the run's predictions of its own documents; an evaluation of other documents (data.max_eval_documents=20) must not
    replace it."""
    from longbert.config import parse_override

    changes_data = any(parse_override(text)[0][0] == "data" for text in overrides)
    return f"{split}-{OVERRIDDEN}" if changes_data else split


def evaluate(run_dir: str | Path, split: str = "test", batch_size: int | None = None,
             overrides: list[str] | tuple[str, ...] = (), data=None, precision: str = "auto") -> dict:
    """Evaluate a finished run's kept model on one split of the run's own data (as its recipe describes, with
    `key.path=value` overrides of its data and eval sections, e.g. "data.max_eval_documents=100"); only that split
    is tokenized. Writes metrics-<name>.json/.md and predictions-<name>.jsonl into the run folder (and, with many
    classes, confusion-matrix-<name>.png), where <name> is the split's, or <split>-with-overrides when `overrides`
    change the data (`evaluation_name`: the run's own files are left as they were); returns the metrics.
    `data`: the object in memory the run was trained on (`train(recipe, data=...)`), needed again for such a run.
    `precision`: auto, fp32, bf16 or int8 (`longbert.utils.hardware.INFERENCE_PRECISIONS`); the metrics record it."""
    from longbert.config import load_recipe, parse_override
    from longbert.data.documents import load_corpus
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.utils.destinations import locked

    run_dir = Path(run_dir)
    recipe_file = run_dir / "recipe.yaml"
    if not recipe_file.is_file():
        raise LongbertError(f"{run_dir} is not a longbert run folder (no recipe.yaml)")
    for text in overrides:
        keys, _ = parse_override(text)
        if keys[0] not in EVALUATE_SECTIONS or len(keys) < 2:
            raise LongbertError(f"override {text!r}: evaluate can change only the "
                                f"{' and '.join(EVALUATE_SECTIONS)} sections of a finished run's recipe")
    from longbert.utils.hardware import check_precision

    check_precision(precision, "--precision")
    process = process_state()  # which process this is, and its device (`accelerate launch` starts one per device)
    # Not while a training writes the folder; only the main process writes, so only it holds the lock.
    with locked(run_dir) if process.is_main_process else nullcontext():
        recipe = load_recipe(recipe_file, overrides)
        available = ["train", "validation"] + (["test"] if recipe.data.test_split else [])
        if split not in available:
            raise LongbertError(f"split {split!r} is not in this run's data; available: {', '.join(available)}")
        model = LongDocumentClassifier.from_pretrained(run_dir).to(process.device)
        corpus = load_corpus(recipe.data, model.tokenizer, recipe.seed, model.multi_label, source=data, roles=[split])
        if split not in corpus.splits:
            raise LongbertError(f"split {split!r} is not in this run's data; available: {', '.join(corpus.splits)}")
        dataset = corpus.splits[split]
        metrics, raw = evaluate_split(model, dataset, batch_size or recipe.eval.batch_size,
                                      description=f"evaluating {split}", process=process, precision=precision)
        metrics["precision"] = precision
        if not process.is_main_process:
            return metrics
        name = evaluation_name(split, overrides)
        title = f"{recipe.name}: {split}" + (f" (with {', '.join(overrides)})" if name != split else "")
        write_json(run_dir / f"metrics-{name}.json", metrics)
        write_text_atomically(run_dir / f"metrics-{name}.md",
                              metrics_markdown(metrics, model.label_names, title,
                                               run_dir / f"confusion-matrix-{name}.png"))
        write_predictions(run_dir / f"predictions-{name}.jsonl", dataset, raw, model.label_names, model.multi_label,
                          model.thresholds if model.multi_label else None)
    return metrics


def write_predictions(path: Path, dataset, raw: dict, label_names: list[str], multi_label: bool,
                      thresholds: list[float] | None = None) -> None:
    """One JSON line per document (for error analysis): its id (the dataset's `id` column, else the row index), label
    and prediction as indices and as names (label_name, predicted_label; lists of names for multi-label, predicted
    at `thresholds`, 0.5 by default), probabilities, length, unit weights."""
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
            unit_weights=raw["unit_weights"][i] if i < len(raw["unit_weights"]) else None))
    write_prediction_rows(path, rows)


def metrics_markdown(metrics: dict, label_names: list[str], title: str, plot_path: str | Path | None = None) -> str:
    """A short human-readable page for one split's metrics. With more than MANY_CLASSES classes (single-label) the
    page shows the top confusions instead of the whole matrix; given `plot_path`, the whole matrix is written
    there (atomically) as a PNG heatmap and linked from the page by its file name (keep it beside the page)."""
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


def draw_confusion_matrix(ax, matrix: list[list[int]], label_names: list[str], title: str | None = None) -> None:
    """A heatmap of a (C, C) confusion matrix on a matplotlib axis; counts are printed in the cells while they
    fit (up to 25 classes; zeros left blank above MANY_CLASSES), tick labels shrink and the predicted ones turn
    as the classes grow. Callers size the figure (about 0.3-0.35 inch per class)."""
    n = len(label_names)
    ax.imshow(matrix, cmap="Blues")
    if n <= 25:
        peak = max(max(row) for row in matrix) or 1
        for r, row in enumerate(matrix):
            for c, v in enumerate(row):
                if v or n <= MANY_CLASSES:
                    ax.text(c, r, str(v), ha="center", va="center", fontsize=8 if n <= MANY_CLASSES else 6,
                            color="white" if v > peak / 2 else "black")
    size = 8 if n <= 10 else 6
    ax.set_xticks(range(n), label_names, rotation=0 if n <= 3 else (45 if n <= 6 else 90), fontsize=size,
                  ha="center" if n <= 3 else ("right" if n <= 6 else "center"))
    ax.set_yticks(range(n), label_names, fontsize=size)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if title:
        ax.set_title(title)


def confusion_matrix_png(matrix: list[list[int]], label_names: list[str], title: str | None = None) -> bytes:
    """One confusion matrix as PNG bytes, the figure growing with the number of classes."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    side = min(4 + 0.35 * len(label_names), 20)
    fig, ax = plt.subplots(figsize=(side, side))
    draw_confusion_matrix(ax, matrix, label_names, title)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()
