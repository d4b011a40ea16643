"""The comparison report written out: report.md (plots as PNG files beside it), a self-contained report.html (plots
embedded as base64 PNGs), results.json (every number in the report), and the one-screen summary for the terminal.

Both pages render the same blocks (`page.build_blocks`); everything shown comes from the results dict that
`report_numbers.assemble_results` builds for `longbert.compare`."""

from __future__ import annotations

import json
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from longbert.comparison.figures import PLOTS, make_plots
from longbert.comparison.formatting import (
    combined_label,
    combined_rows,
    duration,
    number,
    percent,
    shown_buckets,
)
from longbert.comparison.page import build_blocks
from longbert.comparison.verdict import verdict
from longbert.data.lengths import BUCKET_SHORT_TITLES
from longbert.errors import LongbertError, first_line
from longbert.utils.atomic import json_text
from longbert.utils.folders import REPORT_FILES, RESULTS_FILE
from longbert.utils.outputs import atomic_folder, finish_swaps
from longbert.utils.pages import render_html, render_markdown


def write_report(results: dict, folder: str | Path) -> None:
    """Write report.md, report.html, results.json and the plot PNGs into `folder`, atomically (the folder is built
    beside the target and moved into place; an older report's own files there are replaced, anything else in it is
    kept: longbert.utils.outputs)."""
    # Only an earlier report (its results.json) or an empty folder is replaced: a folder of other files is refused.
    with atomic_folder(folder, RESULTS_FILE, "report folder") as staging:
        plots = make_plots(results)
        results["plots"] = {key: PLOTS[key] for key in plots}
        for key, png in plots.items():
            (staging / PLOTS[key]).write_bytes(png)
        blocks = build_blocks(results)
        markdown, html = REPORT_FILES
        (staging / markdown).write_text(render_markdown(blocks, PLOTS))
        (staging / html).write_text(render_html(blocks, plots, f"longbert compare: {results['name']}"))
        (staging / RESULTS_FILE).write_text(json_text(results, RESULTS_FILE, indent=2, ensure_ascii=False))


def report_files(folder: Path) -> dict[str, str]:
    """Where a report's files are, as results.json records them (`results["report"]`)."""
    markdown, html = REPORT_FILES
    return {"folder": str(folder), "markdown": str(folder / markdown), "html": str(folder / html),
            "results": str(folder / RESULTS_FILE)}


def render_again(folder: str | Path) -> None:
    """An earlier report rendered again from its own results.json with this version's pages and plots (`longbert
    report`): nothing is trained or evaluated again, so every number stays and only how they are shown changes. The
    report's own files are replaced, as compare replaces them; a folder that is not a report, or whose results.json
    cannot be read or lacks what the pages show (another version's, or one edited by hand), is one LongbertError line,
    and the folder is left as it was."""
    folder = Path(folder)
    finish_swaps(folder)  # a report whose replacement was killed mid-swap is put back first
    file = folder / RESULTS_FILE
    if not folder.is_dir():
        raise LongbertError(f"{folder} is not a folder: give a report folder that `longbert compare` wrote")
    if not file.is_file():
        raise LongbertError(f"{folder} holds no {RESULTS_FILE}: it is not a report that `longbert compare` wrote")
    try:
        results = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise LongbertError(f"{file} cannot be read: {first_line(error)}") from None
    if not isinstance(results, dict) or not {"name", "strategies", "strategy_order"} <= set(results):
        raise LongbertError(f"{file} is not a compare report's results (no name, strategies and strategy_order)")
    results["report"] = report_files(folder)
    try:
        write_report(results, folder)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:  # a field missing or reshaped:
        # written by another version, or edited by hand
        raise LongbertError(f"{file} cannot be rendered: it is not as this version of longbert writes it "
                            f"({type(error).__name__}: {first_line(error)}); run the compare again to rewrite it"
                            ) from None


# ------------------------------------------------------------------------------------------------------------
# The terminal summary


def print_summary(results: dict, console=None) -> None:
    """One screen: a rich table with the headline numbers per strategy, the verdict, and where the report is."""
    console = console or Console()
    names = results["strategy_order"]
    s = results["strategies"]
    table = Table(title=f"longbert compare: {results['name']} (test accuracy by length in tokens)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    buckets = shown_buckets(results)
    for header in ("strategy", "acc", "F1", *[BUCKET_SHORT_TITLES[b] for b in buckets], "train", "docs/s",
                   "peak MB", "params"):
        table.add_column(header, justify="left" if header == "strategy" else "right", no_wrap=True)
    for n in names:
        r = s[n]
        table.add_row(n, percent(r["accuracy"]), f"{r['macro_f1']:.3f}",
                      *[percent(r["by_length"].get(b, {}).get("accuracy")) for b in buckets],
                      duration(r["train_seconds"]), number(r["speed"]["documents_per_second"]),
                      number(r["speed"]["peak_memory_mb"], 0), f"{r['trainable_parameters'] / 1e6:.1f}M")
    for combined in combined_rows(results):
        table.add_row(combined_label(combined), percent(combined["accuracy"]), f"{combined['macro_f1']:.3f}",
                      *[percent(combined["by_length"].get(b, {}).get("accuracy")) for b in buckets],
                      "–", "–", "–", "–")
    base = results.get("baseline")
    if base:
        table.add_row(f"{base['name']} (baseline)", percent(base["accuracy"]), f"{base['macro_f1']:.3f}",
                      *[percent(base["by_length"].get(b, {}).get("accuracy")) for b in buckets],
                      duration(base["train_seconds"]), "–", "–", "–")
    print_whole(console, table)
    for line in verdict(results):
        console.print(f"• {line}", highlight=False)
    runs = ", ".join(f"{n} {s[n]['status']}" for n in names)
    console.print(f"runs ({runs}): {Path(s[names[0]]['run_dir']).parent}/", highlight=False)
    report = results.get("report", {})
    if report:
        console.print(f"report: {report['folder']}/ (report.md, report.html, results.json)", highlight=False)


def print_whole(console, table) -> None:
    """Print a rich table with nothing cut off. Where the console is narrower than the table, rich would shorten
    cells to fit ("83.…"), so the table alone is printed at its full width instead. Redirected output (a log file,
    CI) gets a fixed width of 80 columns that no reader's screen imposes; a narrow terminal folds the long lines,
    which still shows every digit."""
    needed = console.measure(table, options=console.options.update_width(10**4)).maximum
    if needed <= console.width:
        console.print(table)
        return
    width = console.width
    console.width = needed
    try:
        console.print(table)
    finally:
        console.width = width
