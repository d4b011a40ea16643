"""The comparison report written out: report.md (plots as PNG files beside it), a self-contained report.html (plots
embedded as base64 PNGs), results.json (every number in the report), and the one-screen summary for the terminal.

Both pages render the same blocks (`page.build_blocks`); everything shown comes from the results dict that
`results.assemble_results` builds for `longbert.compare`."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

from longbert.comparison.formatting import BUCKETS, combined_label, combined_rows, duration, number, percent
from longbert.comparison.page import build_blocks
from longbert.comparison.plots import PLOTS, make_plots
from longbert.comparison.verdict import verdict

REPORT_MARKER = "results.json"  # in every report folder: what says a folder is an earlier report


def write_report(results: dict, folder: str | Path) -> None:
    """Write report.md, report.html, results.json and the plot PNGs into `folder`, atomically (the folder is built
    beside the target and moved into place; an older report of that name is replaced whole)."""
    from longbert.utils.atomic import atomic_folder

    # Only an earlier report (its results.json) or an empty folder is replaced: a folder of other files is refused.
    with atomic_folder(folder, REPORT_MARKER, "report folder") as staging:
        plots = make_plots(results)
        results["plots"] = {key: PLOTS[key] for key in plots}
        for key, png in plots.items():
            (staging / PLOTS[key]).write_bytes(png)
        blocks = build_blocks(results)
        (staging / "report.md").write_text(render_markdown(blocks))
        (staging / "report.html").write_text(render_html(blocks, plots, f"longbert compare: {results['name']}"))
        (staging / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))


# ------------------------------------------------------------------------------------------------------------
# Markdown


def _segments(value) -> list[tuple[str, str | None]]:
    return [(value, None)] if isinstance(value, str) else list(value)


_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)


def _md_escape(text: str) -> str:
    text = _BR.sub(" ", text)
    return re.sub(r"([\\`*_{}\[\]<>#|])", r"\\\1", text)


def _md_inline(value) -> str:
    out = []
    for text, style in _segments(value):
        if style == "code":
            out.append(f"`{text}`")
            continue
        escaped = _md_escape(text)
        if style in ("mark", "strong") and escaped.strip():
            lead, core, trail = re.match(r"^(\s*)(.*?)(\s*)$", escaped, re.S).groups()
            out.append(f"{lead}**{core}**{trail}")
        else:
            out.append(escaped)
    return "".join(out).replace("\n", " ")


def render_markdown(blocks: list[tuple]) -> str:
    """The blocks as Markdown; an image block links its plot's file (PLOTS), which is written beside the page."""
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            lines += ["#" * block[1] + " " + _md_escape(block[2]), ""]
        elif kind == "p":
            lines += [_md_inline(block[1]), ""]
        elif kind == "ul":
            lines += [f"- {_md_inline(item)}" for item in block[1]] + [""]
        elif kind == "table":
            headers, rows = block[1], block[2]
            lines.append("| " + " | ".join(_md_escape(h) for h in headers) + " |")
            lines.append("|" + "---|" * len(headers))
            lines += ["| " + " | ".join(_md_escape(str(c)) for c in row) + " |" for row in rows]
            lines.append("")
        elif kind == "img":
            lines += [f"![{block[2]}]({PLOTS[block[1]]})", ""]
        elif kind == "quote":
            lines += ["> " + _md_inline(block[1]), ""]
        elif kind == "code":
            lines += ["```", block[1], "```", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# HTML


def _html_inline(value) -> str:
    out = []
    for text, style in _segments(value):
        escaped = html.escape(text if style == "code" else _BR.sub(" ", text))
        out.append(f"<{style}>{escaped}</{style}>" if style in ("mark", "strong", "code") else escaped)
    return "".join(out)


STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
blockquote { border-left: 4px solid #ccc; margin: 0.5em 0 1.2em; padding: 0.3em 1em; color: #333; background: #fafafa; }
mark { background: #ffe066; }
img { max-width: 100%; }
pre { background: #f5f5f5; padding: 0.6em; overflow-x: auto; }
.strip { display: flex; height: 1.4em; border: 1px solid #bbb; margin: 0.4em 0 0.1em; }
.strip div { flex: 1; }
.strip .decisive { box-shadow: inset 0 -4px 0 #c0392b; }
.strip-axis { display: flex; justify-content: space-between; font-size: 0.8em; color: #666; margin-bottom: 0.8em; }
"""


def render_html(blocks: list[tuple], plots: dict[str, bytes], title: str) -> str:
    """A single HTML file: inline CSS, plots embedded as base64 PNGs, nothing fetched from elsewhere."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body>"]
    for block in blocks:
        kind = block[0]
        if kind == "h":
            parts.append(f"<h{block[1]}>{html.escape(block[2])}</h{block[1]}>")
        elif kind == "p":
            parts.append(f"<p>{_html_inline(block[1])}</p>")
        elif kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{_html_inline(i)}</li>" for i in block[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block[1])
            body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                           for row in block[2])
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "img" and block[1] in plots:
            data = base64.b64encode(plots[block[1]]).decode("ascii")
            parts.append(f'<img alt="{html.escape(block[2])}" src="data:image/png;base64,{data}">')
        elif kind == "quote":
            parts.append(f"<blockquote>{_html_inline(block[1])}</blockquote>")
        elif kind == "code":
            parts.append(f"<pre><code>{html.escape(block[1])}</code></pre>")
        elif kind == "strip":  # (cells of (shade 0-1, decisive, tooltip), left label, right label)
            marked = ' class="decisive"'
            cells = "".join(f'<div{marked if decisive else ""} title="{html.escape(tip)}" '
                            f'style="background: rgba(230, 126, 34, {shade:.3f})"></div>'
                            for shade, decisive, tip in block[1])
            parts.append(f'<div class="strip">{cells}</div><div class="strip-axis"><span>{html.escape(block[2])}'
                         f'</span><span>{html.escape(block[3])}</span></div>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------------------------------------------------
# The terminal summary


def print_summary(results: dict, console=None) -> None:
    """One screen: a rich table with the headline numbers per strategy, the verdict, and where the report is."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    names = results["strategy_order"]
    s = results["strategies"]
    table = Table(title=f"longbert compare: {results['name']} (test accuracy by length in tokens)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    for header in ("strategy", "acc", "F1", "≤512", "513–1k", ">1k", "train", "docs/s", "peak MB", "params"):
        table.add_column(header, justify="left" if header == "strategy" else "right", no_wrap=True)
    for n in names:
        r = s[n]
        table.add_row(n, percent(r["accuracy"]), f"{r['macro_f1']:.3f}",
                      *[percent(r["by_length"].get(b, {}).get("accuracy")) for b in BUCKETS],
                      duration(r["train_seconds"]), number(r["speed"]["documents_per_second"]),
                      number(r["speed"]["peak_memory_mb"], 0), f"{r['trainable_parameters'] / 1e6:.1f}M")
    for combined in combined_rows(results):
        table.add_row(combined_label(combined), percent(combined["accuracy"]), f"{combined['macro_f1']:.3f}",
                      *[percent(combined["by_length"].get(b, {}).get("accuracy")) for b in BUCKETS],
                      "–", "–", "–", "–")
    base = results.get("baseline")
    if base:
        table.add_row(f"{base['name']} (baseline)", percent(base["accuracy"]), f"{base['macro_f1']:.3f}",
                      *[percent(base["by_length"].get(b, {}).get("accuracy")) for b in BUCKETS],
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
