"""The comparison report's figures as PNG bytes (matplotlib, Agg backend: no display needed): accuracy by length
bucket per strategy beside the baseline, throughput and memory against document length, and a confusion matrix per
strategy."""

from __future__ import annotations

import io
import itertools

from longbert.comparison.formatting import BUCKET_TITLES, BUCKETS, combined_label, combined_rows
from longbert.comparison.statistics import wilson_interval
from longbert.config import is_multi_label

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
    if not is_multi_label(results["problem_type"]):
        plots["confusion_matrices"] = _confusion_matrices(plt, results)
    return plots


def _accuracy_by_length(plt, results: dict, colours: dict) -> bytes:
    """Each row's accuracy, overall first and then per length bucket, as a point with its 95% Wilson interval; the
    baseline in grey squares. Buckets without test documents are left out, and the axis spans the intervals (not
    0 to 1), so a few points' difference is visible; the bars of the interval say which differences may be noise."""
    from matplotlib.ticker import PercentFormatter

    shown, colours = _accuracy_rows(results, colours)
    first = results["strategies"][results["strategy_order"][0]]
    groups = [("all", first["documents"])] + [(b, first["by_length"].get(b, {}).get("documents", 0)) for b in BUCKETS]
    # Buckets without test documents, or holding all of them (the "all" group again), are left out.
    groups = groups[:1] + [(g, n) for g, n in groups[1:] if n and n != groups[0][1]]
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(groups) + 2), 4))
    width = 0.8 / len(shown)
    ends = []
    for k, (label, row) in enumerate(shown.items()):
        for g, (group, _) in enumerate(groups):
            point = row if group == "all" else row["by_length"].get(group, {})
            if point.get("accuracy") is None or not point.get("documents"):
                continue
            accuracy = point["accuracy"]
            low, high = point.get("accuracy_ci95") or wilson_interval(round(accuracy * point["documents"]),
                                                                      point["documents"])
            ends += [low, high]
            ax.errorbar(g + (k - (len(shown) - 1) / 2) * width, accuracy, yerr=[[accuracy - low], [high - accuracy]],
                        fmt="s" if label.endswith("(baseline)") else "o", color=colours[label], capsize=3,
                        label=label if g == 0 else None)
    ax.set_xticks(range(len(groups)), [f"{BUCKET_TITLES.get(g, g)}\n(n={n})" for g, n in groups])
    if ends:
        low, high = min(ends), max(ends)
        margin = max(0.02, (high - low) * 0.1)
        ax.set_ylim(max(0.0, low - margin), min(1.0, high + margin))
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=None))  # 62.5%, not a rounded 62%
    ax.set_ylabel("accuracy (95% interval)")
    ax.set_xlabel("document length (tokens)")
    ax.legend(fontsize="small", ncol=min(len(shown), 3), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return _png(plt, fig)


def _accuracy_rows(results: dict, colours: dict) -> tuple[dict, dict]:
    """({label: row} of every strategy, combined row and the baseline, in the report's order; their colours)."""
    shown = {n: results["strategies"][n] for n in results["strategy_order"]}
    for combined, grey in zip(combined_rows(results), itertools.cycle(("0.3", "0.45", "0.2", "0.5"))):
        shown[combined_label(combined)] = combined
        colours = {**colours, combined_label(combined): grey}
    base = results.get("baseline")
    if base:
        shown[f"{base['name']} (baseline)"] = base
        colours = {**colours, f"{base['name']} (baseline)": "0.6"}
    return shown, colours


def _speed_by_length(plt, results: dict, colours: dict) -> bytes:
    """Throughput and the memory inference added, against the mean length of each bucket's timed documents. The
    throughput axis is logarithmic with plain numbers; the memory axis starts at 0, so gaps are not exaggerated."""
    from matplotlib.ticker import LogLocator, ScalarFormatter

    names, s = results["strategy_order"], results["strategies"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for n in names:
        points = [r for r in (s[n].get("speed_by_length") or {}).values() if r.get("documents")]
        points.sort(key=lambda r: r["mean_tokens"])
        x = [r["mean_tokens"] for r in points]
        left.plot(x, [r["documents_per_second"] for r in points], "o-", label=n, color=colours[n])
        right.plot(x, [r.get("added_memory_mb", r["peak_memory_mb"]) for r in points], "o-", label=n,
                   color=colours[n])
    left.set_ylabel("documents / second (log scale)")
    kinds = {r.get("memory_kind") for n in names for r in (s[n].get("speed_by_length") or {}).values()} - {None}
    right.set_ylabel(f"memory added by inference (MB, {' / '.join(sorted(kinds))})")
    for ax in (left, right):
        ax.set_xlabel("mean document length in bucket (tokens)")
        ax.grid(alpha=0.3)
    left.set_yscale("log")
    left.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    left.yaxis.set_minor_formatter(plt.NullFormatter())
    plain = ScalarFormatter()
    plain.set_scientific(False)
    left.yaxis.set_major_formatter(plain)
    right.set_ylim(0, right.get_ylim()[1] * 1.08)  # from zero, with room above the highest point's marker
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
