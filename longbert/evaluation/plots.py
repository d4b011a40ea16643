"""Every figure longbert draws: plain numbers in, PNG bytes out. matplotlib's object API on the Agg canvas (no display,
no pyplot state, nothing set when this module is imported). The callers decide what to draw and where to write it:
a run's training curves (training/curves.py), an evaluation's confusion matrix (evaluation/evaluate.py), a comparison
report's figures (comparison/figures.py) and a learning curve (comparison/learning_curve.py)."""

from __future__ import annotations

import io
import itertools

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, PercentFormatter, ScalarFormatter

from longbert.evaluation.metrics import MANY_CLASSES

# One point of a row: (accuracy, low, high), the last two its 95% interval.
Point = tuple[float, float, float]


def figure(**settings) -> Figure:
    """A figure on its own Agg canvas (`settings`: Figure's figsize, dpi)."""
    fig = Figure(**settings)
    FigureCanvasAgg(fig)
    return fig


def png(fig: Figure, tight: bool = True) -> bytes:
    """The figure as PNG bytes at 110 dpi; `tight` crops it to what is drawn."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, **({"bbox_inches": "tight"} if tight else {}))
    return buffer.getvalue()


def strategy_colours(names: list[str]) -> dict:
    """Each name's colour, in order (tab10): a strategy keeps its colour in every figure of a report."""
    return {n: colormaps["tab10"](i % 10) for i, n in enumerate(names)}


# ------------------------------------------------------------------------------------------------------------
# A run's own figures


def training_curves_png(losses: list[tuple[int, float]], scores: list[tuple[int, float]], metric: str,
                        best_step: int | None, title: str) -> bytes:
    """The training loss and the validation `metric` against the optimisation step, side by side, each as (step,
    value) points; the kept step (`best_step`) starred; a panel with no points says "not logged"."""
    fig = figure(figsize=(10, 3.6))
    left, right = fig.subplots(1, 2)
    for ax, points, label in ((left, losses, "training loss (mean since the last log)"),
                              (right, scores, f"validation {metric}")):
        if points:
            ax.plot(*zip(*points), "o-" if len(points) <= 30 else "-", markersize=4)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="0.5")
        ax.set_xlabel("optimisation step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    kept = [(step, value) for step, value in scores if step == best_step]
    if kept:
        right.plot(*kept[0], "*", markersize=14, color="tab:orange", label=f"kept (step {kept[0][0]})")
        right.legend(fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return png(fig, tight=False)


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
    side = min(4 + 0.35 * len(label_names), 20)
    fig = figure(figsize=(side, side))
    draw_confusion_matrix(fig.subplots(), matrix, label_names, title)
    return png(fig)


# ------------------------------------------------------------------------------------------------------------
# A comparison's figures


def confusion_matrices_png(matrices: dict[str, list[list[int]]], label_names: list[str]) -> bytes:
    """A confusion matrix per name, side by side; with many classes each panel grows and wraps to rows."""
    side = 3.2 if len(label_names) <= MANY_CLASSES else min(3.2 + 0.3 * len(label_names), 12)
    columns = len(matrices) if len(label_names) <= MANY_CLASSES else min(len(matrices), 2)
    rows = -(-len(matrices) // columns)
    fig = figure(figsize=(side * columns + 0.5, (side + 0.2) * rows))
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, (name, matrix) in zip(axes.flat, matrices.items()):
        draw_confusion_matrix(ax, matrix, label_names, name)
    for ax in list(axes.flat)[len(matrices):]:
        ax.set_visible(False)
    fig.tight_layout()
    return png(fig)


def accuracy_by_length_png(groups: list[str], strategies: dict[str, list[Point | None]],
                           combined: dict[str, list[Point | None]], baseline: dict[str, list[Point | None]]) -> bytes:
    """Each row's accuracy in each group of documents (`groups`: the tick labels, overall first, then by length), as
    a point with its interval (None: no point there): the strategies in their colours, the combined rows in greys,
    the baseline in grey squares. The axis spans the intervals (not 0 to 1), so a few points' difference is
    visible; the bars of the interval say which differences may be noise."""
    colours = strategy_colours(list(strategies))
    colours |= dict(zip(combined, itertools.cycle(("0.3", "0.45", "0.2", "0.5")))) | dict.fromkeys(baseline, "0.6")
    shown = {**strategies, **combined, **baseline}
    fig = figure(figsize=(max(6.0, 2.2 * len(groups) + 2), 4))
    ax = fig.subplots()
    width = 0.8 / len(shown)
    ends = []
    for k, (label, points) in enumerate(shown.items()):
        for g, point in enumerate(points):
            if point is None:
                continue
            accuracy, low, high = point
            ends += [low, high]
            ax.errorbar(g + (k - (len(shown) - 1) / 2) * width, accuracy, yerr=[[accuracy - low], [high - accuracy]],
                        fmt="s" if label in baseline else "o", color=colours[label], capsize=3,
                        label=label if g == 0 else None)
    ax.set_xticks(range(len(groups)), groups)
    if ends:
        low, high = min(ends), max(ends)
        margin = max(0.02, (high - low) * 0.1)
        ax.set_ylim(max(0.0, low - margin), min(1.0, high + margin))
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=None))  # 62.5%, not a rounded 62%
    ax.set_ylabel("accuracy (95% interval)")
    ax.set_xlabel("document length (tokens)")
    ax.legend(fontsize="small", ncol=min(len(shown), 3), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return png(fig)


def speed_by_length_png(series: dict[str, list[tuple[float, float, float]]], memory_kinds: list[str]) -> bytes:
    """Throughput and the memory inference added against document length, a line per strategy (its (mean tokens,
    documents per second, MB) points, in its colour). The throughput axis is logarithmic with plain numbers; the
    memory axis starts at 0, so gaps are not exaggerated."""
    colours = strategy_colours(list(series))
    fig = figure(figsize=(10, 4))
    left, right = fig.subplots(1, 2)
    for n, points in series.items():
        x = [p[0] for p in points]
        left.plot(x, [p[1] for p in points], "o-", label=n, color=colours[n])
        right.plot(x, [p[2] for p in points], "o-", label=n, color=colours[n])
    left.set_ylabel("documents / second (log scale)")
    right.set_ylabel(f"memory added by inference (MB, {' / '.join(memory_kinds)})")
    for ax in (left, right):
        ax.set_xlabel("mean document length in bucket (tokens)")
        ax.grid(alpha=0.3)
    left.set_yscale("log")
    left.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    left.yaxis.set_minor_formatter(NullFormatter())
    plain = ScalarFormatter()
    plain.set_scientific(False)
    left.yaxis.set_major_formatter(plain)
    right.set_ylim(0, right.get_ylim()[1] * 1.08)  # from zero, with room above the highest point's marker
    left.legend(fontsize="small")
    fig.tight_layout()
    return png(fig)


def learning_curve_png(title: str, sizes: list[int], rows: dict[str, list[tuple[int, float, tuple | None]]],
                       baseline: str | None, test_documents: int) -> bytes:
    """Test accuracy against training documents (log scale), a line per row of (size, accuracy, 95% interval or
    None) points; the `baseline` row dashed."""
    fig = figure(figsize=(7.5, 4.8), dpi=110)
    ax = fig.subplots()
    count = len(rows)
    for i, (row, points) in enumerate(rows.items()):
        shift = 1 + 0.025 * (i - (count - 1) / 2)  # rows side by side at each size, so that their intervals show
        x = [s * shift for s, _, _ in points]
        y = [100 * accuracy for _, accuracy, _ in points]
        low = [100 * (accuracy - ci[0]) if ci else 0 for _, accuracy, ci in points]
        high = [100 * (ci[1] - accuracy) if ci else 0 for _, accuracy, ci in points]
        style = "--" if row == baseline else "-"
        ax.errorbar(x, y, yerr=[low, high], fmt=style + "o", capsize=3, markersize=4, linewidth=1.5,
                    label=row + (" (baseline)" if row == baseline else ""))
    ax.set_xscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{s:,}" for s in sizes])
    ax.minorticks_off()
    ax.set_xlabel("training documents")
    ax.set_ylabel(f"test accuracy, % ({test_documents:,} documents; 95% interval)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return png(fig, tight=False)


# ------------------------------------------------------------------------------------------------------------
# How far probabilities can be trusted


def reliability_diagram_png(sections: dict[str, dict], columns: int = 3) -> bytes:
    """A reliability diagram per name, side by side (`columns` a line): each bin's accuracy (y) against its mean
    confidence (x), the diagonal of perfect calibration, and below, a small panel of how many documents each bin holds
    (the number on each bar). `sections`: calibration sections as the metrics hold them (`calibration_section`:
    ece, bins of from/to/count/confidence/accuracy, and `uncalibrated` with its own ece and bins for a calibrated
    model, drawn as well: before and after)."""
    columns = max(1, min(columns, len(sections)))
    lines = -(-len(sections) // columns)
    fig = figure(figsize=(4.8 * columns, 5.2 * lines + 0.4))
    grid = fig.add_gridspec(2 * lines, columns, height_ratios=[3, 1] * lines, hspace=0.08, wspace=0.25)
    start = _reliability_start(sections)
    for k, (name, section) in enumerate(sections.items()):
        line, column = divmod(k, columns)
        top = fig.add_subplot(grid[2 * line, column])
        bottom = fig.add_subplot(grid[2 * line + 1, column], sharex=top)
        _draw_reliability(top, bottom, section, start)
        top.set_title(name, fontsize="medium")
        if column == 0:
            top.set_ylabel("accuracy: how often it was right")
            bottom.set_ylabel("documents\n(log scale)", fontsize="small")
    fig.suptitle("Reliability: how often the model was right (y) when it was this sure (x); on the diagonal, "
                 "as often as it said" if columns > 1 else "Reliability: how often the model was right (y)\nwhen "
                 "it was this sure (x); on the diagonal, as often as it said", fontsize="medium")
    return png(fig)


def _reliability_start(sections: dict[str, dict]) -> tuple[float, float]:
    """Where the confidence axis and the accuracy axis start: the tenth below the lowest bin's edge (0.5 for two
    classes, whose confidence is never below it), and below the lowest accuracy where that is lower still."""
    parts = [part for s in sections.values() for part in (s, s.get("uncalibrated") or {})]
    edges = [b["from"] for part in parts for b in part.get("bins", [])] or [0.0]
    accuracies = [b["accuracy"] for part in parts for b in part.get("bins", [])] or [0.0]
    x = min(0.5, int(10 * min(edges)) / 10)
    return x, min(x, int(10 * min(accuracies)) / 10)


def _draw_reliability(top, bottom, section: dict, start: tuple[float, float]) -> None:
    """One reliability diagram: accuracy against confidence on `top` (a point at each bin's mean confidence, joined),
    before calibration too where the section has it; the bins' document counts as bars on `bottom`."""
    before = section.get("uncalibrated")
    series = [(label, part, colour, style) for label, part, colour, style in (
        ("before calibration", before, "tab:orange", "s--"),
        ("after calibration" if before else "its probabilities", section, "tab:blue", "o-")) if part]
    top.plot([0, 1], [0, 1], ":", color="0.4", linewidth=1, label="perfectly calibrated")
    width = (section["bins"][0]["to"] - section["bins"][0]["from"]) if section["bins"] else 1 / 15
    for k, (label, part, colour, style) in enumerate(series):
        bins = part["bins"]
        top.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], style, color=colour, markersize=5,
                 linewidth=1.2, label=f"{label} (ECE {part['ece']:.3f})")
        offset = (k - (len(series) - 1) / 2) * width / len(series)
        bars = bottom.bar([(b["from"] + b["to"]) / 2 + offset for b in bins], [b["count"] for b in bins],
                          width=width / len(series) * 0.9, color=colour, alpha=0.8)
        bottom.bar_label(bars, [f"{b['count']:,}" for b in bins], fontsize=6.5, padding=1,
                         rotation=90 if len(series) > 1 else 0)
    top.set_xlim(start[0], 1.0)
    top.set_ylim(start[1], 1.02)
    for axis in (top.xaxis, top.yaxis):
        axis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
    top.tick_params(labelbottom=False)
    top.grid(alpha=0.3)
    top.legend(fontsize="small", loc="upper left")
    counts = [b["count"] for _, part, _, _ in series for b in part["bins"]] or [1]
    bottom.set_yscale("log")
    bottom.set_ylim(0.8, max(counts) * 40)  # room above the tallest bar for its number
    bottom.set_xlabel("confidence: the probability of the label it gave")
    bottom.yaxis.set_major_formatter(NullFormatter())
    bottom.yaxis.set_minor_formatter(NullFormatter())
    bottom.tick_params(axis="y", which="both", length=0)


def coverage_curve_png(curves: dict[str, list[dict]], target: float | None = None,
                       chosen: dict[str, tuple[float, float]] | None = None, styles: dict[str, str] | None = None
                       ) -> bytes:
    """Accuracy (y) against coverage, the share of documents answered, the surest first (x): a line per name
    (`curves`: `coverage_curve`'s points, coverage and accuracy). With `target`, that accuracy as a dashed line; with
    `chosen`, each name's (coverage, accuracy) at the threshold chosen for it, starred. `styles`: a name's line style
    ("--" for a baseline), solid by default."""
    colours = strategy_colours(list(curves))
    fig = figure(figsize=(7.5, 4.8))
    ax = fig.subplots()
    lowest = 1.0
    for name, points in curves.items():
        x, y = [p["coverage"] for p in points], [p["accuracy"] for p in points]
        lowest = min([lowest, *y])
        ax.plot(x, y, (styles or {}).get(name, "-"), marker=".", color=colours[name], label=name)
        if chosen and chosen.get(name):
            ax.plot(*chosen[name], "*", markersize=13, color=colours[name], markeredgecolor="black",
                    markeredgewidth=0.6, zorder=3)
    if target is not None:
        ax.axhline(target, linestyle="--", color="0.4", linewidth=1)
        ax.annotate(f"target {100 * target:.0f}%", (0.01, target), xycoords=("axes fraction", "data"),
                    textcoords="offset points", xytext=(0, 3), fontsize="small", color="0.3")
        lowest = min(lowest, target)
    if chosen:
        ax.plot([], [], "*", markersize=10, color="0.5", markeredgecolor="black", markeredgewidth=0.6,
                label="at the threshold chosen on validation")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(max(0.0, lowest - 0.03), 1.005)
    ax.xaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=None))  # 92.5%, not a rounded 92%
    ax.set_title("Accuracy when only the surest documents are answered", fontsize="medium")
    ax.set_xlabel("documents answered (the surest first; the rest go to a person)")
    ax.set_ylabel("accuracy on the documents answered")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="lower left")
    fig.tight_layout()
    return png(fig, tight=False)
