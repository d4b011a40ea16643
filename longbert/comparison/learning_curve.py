"""A learning curve: `longbert compare --train-sizes 100,300,1000`. One compare per training size, each on a nested
subset of the same training documents (`data.nested_train`: the 100 are among the 300, the 300 among the 1,000) and on
the same validation and test documents, then one report over the sizes: every row's test accuracy (with its 95%
interval) and macro-F1 at every size, a plot, and at each size the model to deploy (chosen on validation, as compare
chooses it) with its standing against the baseline after Holm's correction.

Each size is an ordinary compare named `<name>-n<size>` (its report in reports/<name>-n<size>/, its runs in
runs/compare/<name>-n<size>/; finished runs are reused, so an interrupted curve resumes); the curve's own report is
reports/<name>/ (report.md, curve.png, curve.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

from longbert.comparison.formatting import combined_rows, interval, percent
from longbert.comparison.orchestrator import EXAMPLES, SPEED_DOCUMENTS, Comparison
from longbert.comparison.plan import report_name
from longbert.comparison.verdict import baseline_p_values, decide
from longbert.config import is_multi_label
from longbert.data.documents import load_corpus
from longbert.data.lengths import LONG_TOKENS
from longbert.errors import LongbertError
from longbert.evaluation.plots import learning_curve_png
from longbert.modeling.backbone import load_tokenizer
from longbert.utils.folders import CURVE_FILE, CURVE_PLOT
from longbert.utils.outputs import atomic_folder, replaceable_folder


def parse_sizes(text: str) -> list[int]:
    """'100,300,1000' -> [100, 300, 1000]: positive whole numbers, each once, in increasing order (one LongbertError
    line naming what is wrong otherwise)."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise LongbertError(f"--train-sizes takes positive whole numbers separated by commas, got {part!r} in "
                                f"{text!r}")
        sizes.append(int(part))
    if sorted(set(sizes)) != sizes:
        raise LongbertError(f"--train-sizes must name each size once, smallest first, got {text!r}")
    return sizes


def size_name(name: str, size: int) -> str:
    return f"{name}-n{size}"


def learning_curve(strategies: Sequence[str] | str, sizes: Sequence[int], recipe=None, overrides: Iterable[str] = (),
                   name: str | None = None, *, runs_dir: str | Path, reports_dir: str | Path,
                   command: str | None = None, seeds: int = 1) -> dict:
    """Run `compare` at every training size (smallest first) and write the curve's report; returns what curve.json
    holds. The curve's report folder is checked before any training: only an earlier curve, or nothing, is replaced."""
    overrides = list(overrides)
    for o in overrides:
        if o.split("=", 1)[0].strip() in ("data.max_train_documents", "data.nested_train"):
            raise LongbertError(f"--set {o}: --train-sizes sets data.max_train_documents and data.nested_train for "
                                "each size; leave them out")
    name = report_name(name, recipe, overrides)
    folder = replaceable_folder(Path(reports_dir) / name, CURVE_FILE, "learning-curve report folder")
    # Every size's compare is set up (its checks run) before the smallest trains, and the largest size's training
    # subset is drawn once: a size the training documents cannot hold is refused before any training.
    comparisons = {size: Comparison(strategies, recipe, [*overrides, "data.nested_train=true",
                                                         f"data.max_train_documents={size}"],
                                    size_name(name, size), runs_dir=runs_dir, reports_dir=reports_dir,
                                    command=command, speed_documents=SPEED_DOCUMENTS, examples=EXAMPLES,
                                    long_tokens=LONG_TOKENS, data=None, seeds=seeds) for size in sizes}
    for comparison in comparisons.values():
        comparison.setup()
    largest = comparisons[sizes[-1]].first
    load_corpus(largest.data, load_tokenizer(largest.backbone.name), largest.seed,
                is_multi_label(largest.model.problem_type), roles=[])
    per_size = {size: comparison.run().metrics for size, comparison in comparisons.items()}
    curve = summarise(name, command, per_size)
    write_curve(curve, folder)
    return curve


def summarise(name: str, command: str | None, per_size: dict[int, dict]) -> dict:
    """Every row's test numbers at every size, and the model to deploy at each size, from the compares' results."""
    rows: dict[str, dict] = {}
    deployable = {}
    for size, results in per_size.items():
        found = [(n, results["strategies"][n]) for n in results["strategy_order"]]
        found += [(r["name"], r) for r in combined_rows(results)]
        if results.get("baseline"):
            found.append((results["baseline"]["name"], results["baseline"]))
        for row, numbers in found:
            rows.setdefault(row, {})[str(size)] = {
                "accuracy": numbers["accuracy"], "accuracy_ci95": numbers.get("accuracy_ci95"),
                "macro_f1": numbers.get("macro_f1"), "documents": numbers.get("documents")}
        chosen = results.get("deployable")
        if chosen:
            standing = decide(results).against_baseline.get(chosen["row"]) if results.get("baseline") else None
            p = baseline_p_values(results).get(chosen["row"]) if results.get("baseline") else None
            deployable[str(size)] = {"row": chosen["row"], "folder": chosen["folder"], "metric": chosen["metric"],
                                     "validation": chosen["validation"][chosen["row"]],
                                     "accuracy": rows[chosen["row"]][str(size)]["accuracy"],
                                     "against_baseline": standing, "baseline_p_holm": p}
        else:
            deployable[str(size)] = None
    first = next(iter(per_size.values()))
    return {"name": name, "command": command, "sizes": [int(s) for s in per_size],
            "baseline": first["baseline"]["name"] if first.get("baseline") else None,
            "test_documents": first["data"]["test_documents"], "rows": rows, "deployable": deployable,
            "reports": {str(s): r["report"]["folder"] for s, r in per_size.items()}}


def write_curve(curve: dict, folder: Path) -> None:
    """report.md, curve.png and curve.json into `folder`, atomically (only an earlier curve is replaced)."""
    with atomic_folder(folder, CURVE_FILE, "learning-curve report folder") as staging:
        (staging / CURVE_PLOT).write_bytes(plot_curve(curve))
        (staging / "report.md").write_text(render_curve(curve))
        (staging / CURVE_FILE).write_text(json.dumps(curve, indent=2, ensure_ascii=False) + "\n")


def render_curve(curve: dict) -> str:
    """The curve as markdown: accuracy by row and size, the model to deploy at each size, the plot."""
    sizes = [str(s) for s in curve["sizes"]]
    lines = [f"# Learning curve: {curve['name']}", ""]
    if curve["command"]:
        lines += [f"`{curve['command']}`", ""]
    lines += [f"Test accuracy (95% interval) and macro-F1 on the same {curve['test_documents']:,} test documents at "
              "every size; each size's training documents include every smaller size's. Each size's full report: "
              + ", ".join(f"[{int(s):,}](../{Path(curve['reports'][s]).name}/report.md)" for s in sizes) + ".", "",
              "| row | " + " | ".join(f"{int(s):,} training documents" for s in sizes) + " |",
              "|---|" + "---|" * len(sizes)]
    for row, by_size in curve["rows"].items():
        cells = []
        for s in sizes:
            n = by_size.get(s)
            cells.append("–" if n is None else
                         f"{percent(n['accuracy'])}{interval(n['accuracy_ci95']) if n['accuracy_ci95'] else ''}"
                         + (f", F1 {n['macro_f1']:.3f}" if n["macro_f1"] is not None else ""))
        lines.append(f"| {row}{' (baseline)' if row == curve['baseline'] else ''} | " + " | ".join(cells) + " |")
    lines += ["", "## The model to deploy at each size", "",
              "Chosen on validation (never on test) among the rows a model folder can hold, as compare chooses it; a "
              "winner only where it beats the baseline after Holm's correction.", "",
              "| training documents | model to deploy | validation | test accuracy | against the baseline (Holm) | "
              "folder |", "|---|---|---|---|---|---|"]
    for s in sizes:
        d = curve["deployable"].get(s)
        if d is None:
            lines.append(f"| {int(s):,} | none (multi-label, or no row a folder holds) | | | | |")
            continue
        standing = {"better": "beats it", "worse": "below it", "same": "not distinguishable"}.get(
            d["against_baseline"], "no baseline")
        p = f", p = {d['baseline_p_holm']:.3g}" if d["baseline_p_holm"] is not None else ""
        lines.append(f"| {int(s):,} | {d['row']} | {d['metric'].replace('macro_f1', 'macro-F1')} "
                     f"{d['validation']:.3f} | {percent(d['accuracy'])} | {standing}{p} | `{d['folder']}` |")
    lines += ["", f"![test accuracy against training documents]({CURVE_PLOT})", ""]
    return "\n".join(lines)


def plot_curve(curve: dict) -> bytes:
    """Test accuracy against training documents (log scale), one line a row with its 95% intervals; PNG bytes."""
    rows = {row: [(int(s), n["accuracy"], n["accuracy_ci95"]) for s, n in by_size.items()]
            for row, by_size in curve["rows"].items()}
    return learning_curve_png(f"Learning curve: {curve['name']}", curve["sizes"], rows, curve["baseline"],
                              curve["test_documents"])


def curve_command(strategies: str, sizes: str, recipe, overrides, name, runs_dir, reports_dir, command: str,
                  seeds: int) -> None:
    """`longbert compare --train-sizes`: the curve, then a few lines on stdout."""
    curve = learning_curve(strategies, parse_sizes(sizes), recipe, overrides, name, runs_dir=runs_dir,
                           reports_dir=reports_dir, command=command, seeds=seeds)
    print_curve(curve, reports_dir)


def print_curve(curve: dict, reports_dir: str | Path) -> None:
    """A few lines on stdout: the model to deploy at each size and where the report is."""
    for size in curve["sizes"]:
        d = curve["deployable"].get(str(size))
        if d is None:
            print(f"{size:>7,} training documents: no model to deploy")
            continue
        winner = " (beats the baseline: the winner)" if d["against_baseline"] == "better" else ""
        print(f"{size:>7,} training documents: {d['row']}, {percent(d['accuracy'])} on test{winner}")
    print(f"learning curve written to {Path(reports_dir) / curve['name']}/")
