"""Metrics for a trained model: accuracy and macro-F1 (single-label) or exact match, micro-/macro-F1 and Hamming loss
(multi-label, at per-label decision thresholds that `tune_thresholds` can pick on validation), per-class
precision/recall, confusion matrix, the headline metric by document length, and inference documents/second and peak
memory. Written as JSON and Markdown."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

from longbert.utils.atomic import write_bytes_atomically, write_text_atomically
from longbert.data.documents import LENGTH_BUCKETS, length_bucket
from longbert.errors import LongbertError
from longbert.utils.hardware import autocast_for, measure, process_state
from longbert.utils.progress import progress
from longbert.strategies.base import Units


def compute_metrics(labels: np.ndarray, probabilities: np.ndarray, n_tokens: list[int], label_names: list[str],
                    multi_label: bool, thresholds: list[float] | None = None) -> dict:
    """labels (D,) ints or (D, C) multi-hot; probabilities (D, C) -> metrics dict (plain JSON types).
    Single-label: accuracy, macro_f1. Multi-label (a label is predicted when its probability reaches its threshold,
    0.5 unless `thresholds` (C,) says otherwise): exact_match (every label right), micro_f1, macro_f1, hamming_loss.
    by_length holds the headline metric (accuracy, or exact_match) per length bucket."""
    from sklearn.metrics import (confusion_matrix, f1_score, hamming_loss, multilabel_confusion_matrix,
                                 precision_recall_fscore_support)

    classes = list(range(len(label_names)))
    truth = labels.astype(int)
    if multi_label:
        predicted = multi_label_predictions(probabilities, thresholds)
        correct = (predicted == truth).all(1)
        eps = 1e-7
        loss = float(-np.mean(truth * np.log(probabilities + eps) + (1 - truth) * np.log(1 - probabilities + eps)))
        matrix = multilabel_confusion_matrix(truth, predicted).tolist()
    else:
        predicted = probabilities.argmax(1)
        correct = predicted == truth
        loss = float(-np.mean(np.log(probabilities[np.arange(len(truth)), truth] + 1e-7)))
        matrix = confusion_matrix(truth, predicted, labels=classes).tolist()
    precision, recall, f1, support = precision_recall_fscore_support(
        truth, predicted, labels=classes, zero_division=0
    )
    headline = "exact_match" if multi_label else "accuracy"
    by_length = {}
    buckets = np.array([length_bucket(n) for n in n_tokens])
    for _, _, name in LENGTH_BUCKETS:
        in_bucket = buckets == name
        by_length[name] = {
            "documents": int(in_bucket.sum()),
            headline: float(correct[in_bucket].mean()) if in_bucket.any() else None,
        }
    metrics = {"documents": int(len(truth)), headline: float(correct.mean())}
    if multi_label:
        metrics["micro_f1"] = float(f1_score(truth, predicted, average="micro", zero_division=0))
    metrics["macro_f1"] = float(f1_score(truth, predicted, labels=classes, average="macro", zero_division=0))
    if multi_label:
        metrics["hamming_loss"] = float(hamming_loss(truth, predicted))
        metrics["thresholds"] = [float(t) for t in (thresholds or [0.5] * len(classes))]
    metrics.update({
        "loss": loss,
        "per_class": {
            name: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for name, p, r, f, s in zip(label_names, precision, recall, f1, support)
        },
        "confusion_matrix": matrix,
        "by_length": by_length,
    })
    return metrics


# The numbers a validation entry of the training history keeps.
HISTORY_METRICS = ("accuracy", "exact_match", "micro_f1", "macro_f1", "hamming_loss", "loss")


def multi_label_predictions(probabilities: np.ndarray, thresholds: list[float] | None = None) -> np.ndarray:
    """probabilities (D, C) -> (D, C) 0/1: a label is predicted when its probability reaches its threshold (0.5)."""
    limits = np.asarray(thresholds if thresholds is not None else [0.5] * probabilities.shape[1])
    return (probabilities >= limits[None, :]).astype(int)


def tune_thresholds(labels: np.ndarray, probabilities: np.ndarray, per_label: bool) -> list[float]:
    """The multi-label decision thresholds (C,) that maximise F1 on these (validation) predictions: one threshold for
    every label that maximises micro-F1, or (`per_label`) each label's own that maximises its F1. Each threshold is
    halfway between the lowest probability it admits and the next lower one; a label with no positives keeps 0.5."""
    truth = labels.astype(int)
    if per_label:
        return [_best_threshold(truth[:, c], probabilities[:, c]) for c in range(truth.shape[1])]
    return [_best_threshold(truth.ravel(), probabilities.ravel())] * truth.shape[1]


def _best_threshold(truth: np.ndarray, probabilities: np.ndarray) -> float:
    """truth, probabilities (n,) -> the threshold with the best F1 (the highest such one on a tie)."""
    positives = int(truth.sum())
    if positives == 0:
        return 0.5
    order = np.argsort(-probabilities, kind="stable")
    p, t = probabilities[order], truth[order]
    true_positives = np.cumsum(t)  # predicting the first k+1 documents positive
    predicted = np.arange(1, len(p) + 1)
    f1 = 2 * true_positives / (predicted + positives)
    ends = np.r_[p[1:] != p[:-1], True]  # a threshold cannot split tied probabilities
    k = int(np.flatnonzero(ends)[np.argmax(f1[ends])])
    below = p[k + 1] if k + 1 < len(p) else 0.0
    return float(np.clip((p[k] + below) / 2, 1e-6, 1 - 1e-6))


def improves(value: float, best: float | None, metric: str) -> bool:
    """Whether a validation `metric` value beats the best so far (lower is better for loss, higher otherwise)."""
    return best is None or (value < best if metric == "loss" else value > best)


def split_loader(dataset, batch_size: int, cached: list[dict] | None = None, shuffle_seed: int | None = None,
                 group_by_length: bool = False):
    """A tokenized split in batches for the model: {'documents': B (T,) token-id tensors, 'labels'}, or, given the
    split's cached unit vectors (frozen mode, from `frozen.cache_units`), {'unit_vectors': (B, N, H), 'unit_mask':
    (B, N), 'labels'}. With `shuffle_seed`, shuffled in an order that depends on that seed only; with
    `group_by_length` too, in batches of similar length (`data.length_grouped_order`)."""
    from torch.utils.data import DataLoader

    from longbert.data.documents import collate, length_grouped_order
    from longbert.training.frozen import collate_units

    rows = dataset.select_columns(["input_ids", "labels"]) if cached is None else cached
    collate_fn = collate if cached is None else collate_units
    if shuffle_seed is not None and group_by_length:
        order = length_grouped_order(list(dataset["n_tokens"]), batch_size, shuffle_seed)
        # A generator of its own even though the order is fixed: without one, each new iterator draws its base
        # seed from the global RNG, which would shift dropout between a resumed run and an uninterrupted one.
        return DataLoader(rows, batch_size=batch_size, sampler=order, collate_fn=collate_fn,
                          generator=torch.Generator().manual_seed(shuffle_seed))
    order = None if shuffle_seed is None else torch.Generator().manual_seed(shuffle_seed)
    return DataLoader(rows, batch_size=batch_size, shuffle=order is not None, generator=order, collate_fn=collate_fn)


def model_inputs(batch: dict) -> dict:
    """The keyword arguments of LongDocumentClassifier.forward for a batch from `split_loader`."""
    if "unit_vectors" in batch:
        return {"units": Units(batch["unit_vectors"], batch["unit_mask"], batch.get("unit_sizes"))}
    return {"documents": batch["documents"]}


@torch.no_grad()
def predict_dataset(model, dataset, batch_size: int, accelerator=None, description: str = "evaluating",
                    cached: list[dict] | None = None) -> dict:
    """Run `model` over a tokenized split (or its cached unit vectors, see `split_loader`). Returns probabilities
    (D, C), labels, per-document unit weights, and the inference speed and peak memory of the pass."""
    loader = split_loader(dataset, batch_size, cached)
    if accelerator is not None:
        loader = accelerator.prepare(loader)
    was_training = model.training
    model.eval()
    probabilities, labels, weights = [], [], []
    device = next(model.parameters()).device
    tokens = int(np.sum(list(dataset["n_tokens"])))
    autocast = accelerator.autocast() if accelerator is not None else autocast_for(model)
    with measure(device) as cost, autocast:
        for batch in progress(loader, description):
            out = model(**model_inputs(batch))
            p = out.unit_weights
            probs = _core(model).probabilities(out.logits)
            if accelerator is not None:
                probs, batch_labels = accelerator.gather_for_metrics((probs, batch["labels"]))
            else:
                batch_labels = batch["labels"]
            probabilities.append(probs.float().cpu())
            labels.append(batch_labels.cpu())
            if accelerator is None or accelerator.num_processes == 1:
                for b in range(len(batch["labels"])):
                    weights.append(None if p is None else p[b][out.unit_mask[b]].float().cpu().tolist())
    model.train(was_training)
    seconds = cost["seconds"]
    return {
        "probabilities": torch.cat(probabilities).numpy(),
        "labels": torch.cat(labels).numpy(),
        "unit_weights": weights,
        "speed": {
            "documents_per_second": len(dataset) / seconds if seconds else None,
            "tokens_per_second": tokens / seconds if seconds else None,
            "seconds": seconds,
            "peak_memory_mb": cost["peak_memory_mb"],
            "added_memory_mb": cost["added_memory_mb"],
            "memory_kind": cost["memory_kind"],
        },
    }


def _core(model):
    return getattr(model, "module", model)


def predict_across_processes(model, dataset, batch_size: int, process, description: str = "evaluating") -> dict:
    """`predict_dataset` with the split divided between the processes of `process` (accelerate's PartialState):
    each predicts a contiguous share, and every process gets the whole result back in the split's order. The speed
    is that of the slowest process over all documents; the peak memory, the highest of any process."""
    from accelerate.utils import gather_object

    with process.split_between_processes(list(range(len(dataset)))) as share:
        mine = list(share)
    part = predict_dataset(model, dataset.select(mine), batch_size, description=description) if mine else None
    parts = [p for p in gather_object([part]) if p is not None]  # in process order: the split's order
    seconds = max(p["speed"]["seconds"] for p in parts)
    peaks = [p["speed"]["peak_memory_mb"] for p in parts if p["speed"]["peak_memory_mb"] is not None]
    tokens = int(np.sum(list(dataset["n_tokens"])))
    return {
        "probabilities": np.concatenate([p["probabilities"] for p in parts]),
        "labels": np.concatenate([p["labels"] for p in parts]),
        "unit_weights": [w for p in parts for w in p["unit_weights"]],
        "speed": {
            "documents_per_second": len(dataset) / seconds if seconds else None,
            "tokens_per_second": tokens / seconds if seconds else None,
            "seconds": seconds,
            "peak_memory_mb": max(peaks) if peaks else None,
            "added_memory_mb": max((p["speed"]["added_memory_mb"] for p in parts
                                    if p["speed"].get("added_memory_mb") is not None), default=None),
            "memory_kind": parts[0]["speed"]["memory_kind"],
            "processes": process.num_processes,
        },
    }


def evaluate_split(model, dataset, batch_size: int, accelerator=None, description: str = "evaluating",
                   cached: list[dict] | None = None, process=None) -> tuple[dict, dict]:
    """(metrics with a `speed` section, raw predictions) for one tokenized split (or its cached unit vectors).
    Multi-label predictions use the model's thresholds. Given `process` (accelerate's PartialState) of several
    processes and no `accelerator`, the split is divided between them (see `predict_across_processes`)."""
    if accelerator is None and cached is None and process is not None and process.num_processes > 1:
        raw = predict_across_processes(model, dataset, batch_size, process, description)
    else:
        raw = predict_dataset(model, dataset, batch_size, accelerator, description, cached)
    core = _core(model)
    metrics = compute_metrics(raw["labels"], raw["probabilities"], list(dataset["n_tokens"]), core.label_names,
                              core.multi_label, core.thresholds if core.multi_label else None)
    metrics["speed"] = raw["speed"]
    return metrics, raw


def write_predictions(path: Path, dataset, raw: dict, label_names: list[str], multi_label: bool,
                      thresholds: list[float] | None = None) -> None:
    """One JSON line per document (for error analysis): its id (the dataset's `id` column, else the row index), label
    and prediction as indices and as names (label_name, predicted_label; lists of names for multi-label, predicted
    at `thresholds`, 0.5 by default), probabilities, length, unit weights."""
    n_tokens = list(dataset["n_tokens"])
    ids = list(dataset["id"]) if "id" in dataset.column_names else range(len(dataset))
    predicted = (multi_label_predictions(raw["probabilities"], thresholds) if multi_label
                 else raw["probabilities"].argmax(1))
    lines = []
    for i, (probs, label, guess) in enumerate(zip(raw["probabilities"], raw["labels"], predicted)):
        if multi_label:
            names = lambda hot: [n for n, h in zip(label_names, hot) if h]
            label_name, predicted_label = names(label), names(guess)
        else:
            label_name, predicted_label = label_names[int(label)], label_names[int(guess)]
        row = {
            "index": i,
            "id": ids[i],
            "n_tokens": int(n_tokens[i]),
            "label": label.tolist(),
            "label_name": label_name,
            "probabilities": [round(float(p), 6) for p in probs],
            "predicted": guess.tolist() if multi_label else int(guess),
            "predicted_label": predicted_label,
            "unit_weights": raw["unit_weights"][i] if i < len(raw["unit_weights"]) else None,
        }
        lines.append(json.dumps(row) + "\n")
    write_text_atomically(path, "".join(lines))


MANY_CLASSES = 6  # above this many classes a Markdown matrix is unreadable: top confusions and a plot instead
TOP_CONFUSIONS = 10


def top_confusions(matrix: list[list[int]], label_names: list[str], k: int = TOP_CONFUSIONS) -> list[dict]:
    """The k largest off-diagonal cells of a (C, C) confusion matrix (rows true, columns predicted), largest first:
    [{'true', 'predicted', 'count', 'share'}], share being the count over the true class's documents."""
    cells = [(count, t, p) for t, row in enumerate(matrix) for p, count in enumerate(row) if t != p and count > 0]
    cells.sort(key=lambda cell: (-cell[0], cell[1], cell[2]))
    return [{"true": label_names[t], "predicted": label_names[p], "count": int(count),
             "share": count / (sum(matrix[t]) or 1)} for count, t, p in cells[:k]]


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


def headline(metrics: dict) -> str:
    """One line of a split's main numbers: accuracy and macro-F1, or for multi-label exact match, micro- and
    macro-F1."""
    if "exact_match" in metrics:
        return (f"exact match {metrics['exact_match']:.4f}, micro-F1 {metrics['micro_f1']:.4f}, "
                f"macro-F1 {metrics['macro_f1']:.4f} ({metrics['documents']} documents)")
    return f"accuracy {metrics['accuracy']:.4f}, macro-F1 {metrics['macro_f1']:.4f} ({metrics['documents']} documents)"


def metrics_markdown(metrics: dict, label_names: list[str], title: str, plot_path: str | Path | None = None) -> str:
    """A short human-readable page for one split's metrics. With more than MANY_CLASSES classes (single-label) the
    page shows the top confusions instead of the whole matrix; given `plot_path`, the whole matrix is written
    there (atomically) as a PNG heatmap and linked from the page by its file name (keep it beside the page)."""
    lines = [f"# {title}", "", f"- documents: {metrics['documents']}"]
    multi_label = "exact_match" in metrics
    if multi_label:
        thresholds = sorted(set(metrics["thresholds"]))
        lines += [f"- exact match (every label right): {metrics['exact_match']:.4f}",
                  f"- micro-F1: {metrics['micro_f1']:.4f}", f"- macro-F1: {metrics['macro_f1']:.4f}",
                  f"- Hamming loss: {metrics['hamming_loss']:.4f}",
                  "- decision threshold: " + (f"{thresholds[0]:.4f}" if len(thresholds) == 1 else
                                              ", ".join(f"{n} {t:.4f}" for n, t in zip(label_names, metrics["thresholds"])))]
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
        lines.append(f"| {name} | {row['precision']:.4f} | {row['recall']:.4f} | {row['f1']:.4f} | {row['support']} |")
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


def evaluate(run_dir: str | Path, split: str = "test", batch_size: int | None = None,
             overrides: list[str] | tuple[str, ...] = (), data=None) -> dict:
    """Evaluate a finished run's kept model on one split of the run's own data (as its recipe describes, with
    `key.path=value` overrides of its data and eval sections, e.g. "data.max_eval_documents=100"); only that split
    is tokenized. Writes metrics-<split>.json/.md and predictions-<split>.jsonl into the run folder (and, with many
    classes, confusion-matrix-<split>.png); returns the metrics.
    `data`: the object in memory the run was trained on (`train(recipe, data=...)`), needed again for such a run."""
    from longbert.config import load_recipe, parse_override
    from longbert.data.documents import load_corpus
    from longbert.modeling.classifier import LongDocumentClassifier
    from longbert.training.runs import locked

    run_dir = Path(run_dir)
    recipe_file = run_dir / "recipe.yaml"
    if not recipe_file.is_file():
        raise LongbertError(f"{run_dir} is not a longbert run folder (no recipe.yaml)")
    for text in overrides:
        keys, _ = parse_override(text)
        if keys[0] not in EVALUATE_SECTIONS or len(keys) < 2:
            raise LongbertError(f"override {text!r}: evaluate can change only the "
                                f"{' and '.join(EVALUATE_SECTIONS)} sections of a finished run's recipe")
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
                                      description=f"evaluating {split}", process=process)
        if not process.is_main_process:
            return metrics
        write_json(run_dir / f"metrics-{split}.json", metrics)
        write_text_atomically(run_dir / f"metrics-{split}.md",
                              metrics_markdown(metrics, model.label_names, f"{recipe.name}: {split}",
                                               run_dir / f"confusion-matrix-{split}.png"))
        write_predictions(run_dir / f"predictions-{split}.jsonl", dataset, raw, model.label_names, model.multi_label,
                          model.thresholds if model.multi_label else None)
    return metrics


EVALUATE_SECTIONS = ("data", "eval")  # what `evaluate --set` may change: the rest describes how the run was trained


def write_json(path: Path, data) -> None:
    write_text_atomically(path, json.dumps(data, indent=2))
