"""Pages built as blocks, rendered as Markdown and as one self-contained HTML file: compare's report and `explain`'s
page share them. A block is ("h", level, text), ("p", inline), ("ul", [inline, ...]), ("table", headers, rows),
("img", name, alt), ("quote", inline), ("code", text) or, in HTML only, ("strip", cells, left, right); inline text is a
string or a list of (text, style) segments, style None, "strong", "mark" or "code"."""

from __future__ import annotations

import base64
import html
import re

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


def render_markdown(blocks: list[tuple], image_files: dict[str, str]) -> str:
    """The blocks as Markdown; an image block links its image's file (`image_files`: name -> file name), which is
    written beside the page."""
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
            lines += [f"![{block[2]}]({image_files[block[1]]})", ""]
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
