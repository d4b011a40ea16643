"""The comparison report's figures as PNG bytes (matplotlib, Agg backend: no display needed): accuracy by length
bucket per strategy beside the baseline, throughput and memory against document length, and a confusion matrix per
strategy."""

from __future__ import annotations

import io
import itertools

from longbert.comparison.formatting import BUCKET_TITLES, BUCKETS, combined_label, combined_rows

# The file each plot is written to beside report.md (report.html embeds the same bytes).
PLOTS = {
    "accuracy_by_length": "accuracy-by-length.png",
    "speed_by_length": "speed-by-length.png",
    "confusion_matrices": "confusion-matrices.png",
}


def make_plots(results: dict) -> dict[str, bytes]:
    """{plot key: PNG bytes} for the plots the results allow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = results["strategy_order"]
    colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    plots = {"accuracy_by_length": _accuracy_by_length(plt, results, colours)}
    if any(results["strategies"][n].get("speed_by_length") for n in names):
        plots["speed_by_length"] = _speed_by_length(plt, results, colours)
    if results["problem_type"] != "multi_label":
        plots["confusion_matrices"] = _confusion_matrices(plt, results)
    return plots


def _accuracy_by_length(plt, results: dict, colours: dict) -> bytes:
    """Grouped bars, the overall accuracy first, the baseline hatched in grey."""
    names, s = results["strategy_order"], results["strategies"]
    fig, ax = plt.subplots(figsize=(8, 4))
    groups = ["all", *BUCKETS]
    shown = {n: s[n] for n in names}
    for combined, grey in zip(combined_rows(results), itertools.cycle(("0.3", "0.45", "0.2", "0.5"))):
        shown[combined_label(combined)] = combined
        colours = {**colours, combined_label(combined): grey}
    base = results.get("baseline")
    if base:
        shown[f"{base['name']} (baseline)"] = base
        colours = {**colours, f"{base['name']} (baseline)": "0.6"}
    width = 0.8 / len(shown)
    for k, (n, r) in enumerate(shown.items()):
        values = [r["accuracy"]] + [r["by_length"].get(b, {}).get("accuracy") for b in BUCKETS]
        xs = [g + (k - (len(shown) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar([x for x, v in zip(xs, values) if v is not None], [v for v in values if v is not None], width,
                      label=n, color=colours[n], hatch="//" if r is base else None)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)  # so 0 reads as 0, not as missing
    counts = [s[names[0]]["documents"]] + [s[names[0]]["by_length"].get(b, {}).get("documents", 0) for b in BUCKETS]
    ax.set_xticks(range(len(groups)), [f"{BUCKET_TITLES.get(g, g)}\n(n={c})" for g, c in zip(groups, counts)])
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.set_xlabel("document length (tokens)")
    ax.legend(fontsize="small", ncol=min(len(shown), 6), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return _png(plt, fig)


def _speed_by_length(plt, results: dict, colours: dict) -> bytes:
    """Throughput and the memory inference added, against the mean length of each bucket's timed documents."""
    names, s = results["strategy_order"], results["strategies"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for n in names:
        points = [r for r in (s[n].get("speed_by_length") or {}).values() if r.get("documents")]
        points.sort(key=lambda r: r["mean_tokens"])
        x = [r["mean_tokens"] for r in points]
        left.plot(x, [r["documents_per_second"] for r in points], "o-", label=n, color=colours[n])
        right.plot(x, [r.get("added_memory_mb", r["peak_memory_mb"]) for r in points], "o-", label=n,
                   color=colours[n])
    left.set_ylabel("documents / second")
    kinds = {r.get("memory_kind") for n in names for r in (s[n].get("speed_by_length") or {}).values()} - {None}
    right.set_ylabel(f"memory added by inference (MB, {' / '.join(sorted(kinds))})")
    for ax in (left, right):
        ax.set_xlabel("mean document length in bucket (tokens)")
        ax.grid(alpha=0.3)
    left.set_yscale("log")
    left.legend(fontsize="small")
    fig.tight_layout()
    return _png(plt, fig)


def _confusion_matrices(plt, results: dict) -> bytes:
    """A confusion matrix per strategy (single-label only); with many classes each panel grows and wraps to rows."""
    from longbert.evaluation.command import draw_confusion_matrix
    from longbert.evaluation.metrics import MANY_CLASSES

    names, s, labels = results["strategy_order"], results["strategies"], results["label_names"]
    side = 3.2 if len(labels) <= MANY_CLASSES else min(3.2 + 0.3 * len(labels), 12)
    columns = len(names) if len(labels) <= MANY_CLASSES else min(len(names), 2)
    rows = -(-len(names) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(side * columns + 0.5, (side + 0.2) * rows), squeeze=False)
    for ax, n in zip(axes.flat, names):
        draw_confusion_matrix(ax, s[n]["confusion_matrix"], labels, n)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.tight_layout()
    return _png(plt, fig)


def _png(plt, fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()
