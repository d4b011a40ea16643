"""The comparison report: report.md (plots as PNG files beside it), a self-contained report.html (plots embedded
as base64 PNGs), results.json (every number in the report), and the one-screen summary table for the terminal.

The page is built once as a list of blocks and rendered twice (Markdown and HTML), so both always say the same.
Everything shown comes from the results dict that `longbert.comparison.results.assemble_results` builds for `longbert.compare`.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from pathlib import Path

BUCKETS = ("<=512", "513-1024", ">1024")
BUCKET_TITLES = {"<=512": "≤512", "513-1024": "513–1024", ">1024": ">1024"}
PLOTS = {
    "accuracy_by_length": "accuracy-by-length.png",
    "speed_by_length": "speed-by-length.png",
    "confusion_matrices": "confusion-matrices.png",
}


def write_report(results: dict, folder: str | Path) -> None:
    """Write report.md, report.html, results.json and the plot PNGs into `folder`, atomically (the folder is built
    beside the target and moved into place; an older report of that name is replaced whole)."""
    from longbert.utils.atomic import atomic_folder

    with atomic_folder(folder) as staging:
        plots = make_plots(results)
        results["plots"] = {key: PLOTS[key] for key in plots}
        for key, png in plots.items():
            (staging / PLOTS[key]).write_bytes(png)
        blocks = build_blocks(results)
        (staging / "report.md").write_text(render_markdown(blocks))
        (staging / "report.html").write_text(render_html(blocks, plots, f"longbert compare: {results['name']}"))
        (staging / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))


# ------------------------------------------------------------------------------------------------------------
# Formatting numbers


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _num(value, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _seconds(value) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"


def _ci(interval) -> str:
    return "" if not interval else f" ({100 * interval[0]:.1f}–{100 * interval[1]:.1f})"


def _memory(speed: dict) -> str:
    """'1,572 MB (+96)': the peak, and in brackets what the measured pass added (absent in older results)."""
    added = speed.get("added_memory_mb")
    return f"{_num(speed['peak_memory_mb'], 0)} MB" + ("" if added is None else f" (+{_num(added, 0)})")


def _class_balance(data: dict) -> str:
    """'Test documents per class: neg 314 (50.0%), pos 314 (50.0%); over 512 tokens: ...' (per label, multi-label)."""
    def shares(counts: dict, total: int) -> str:
        return ", ".join(f"{n} {c:,} ({_pct(c / total if total else None)})" for n, c in counts.items())

    if not data.get("class_counts"):
        return "Class balance: see results.json."
    return (f"Test documents per class: {shares(data['class_counts'], data['test_documents'])}; over "
            f"{data['long_tokens']} tokens: {shares(data['long_class_counts'], data['long_documents'])}.")


def _settings(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items() if k != "name") or "defaults"


# ------------------------------------------------------------------------------------------------------------
# The verdict: what a practitioner asks first


def verdict(results: dict) -> list[str]:
    """A few sentences answering 'which strategy, and at what cost', hedged by the paired tests."""
    names = results["strategy_order"]
    s = results["strategies"]
    data = results["data"]
    lines = []
    share = data["long_documents"] / data["test_documents"] if data["test_documents"] else 0
    lines.append(f"{data['long_documents']} of {data['test_documents']} test documents ({_pct(share)}) are longer "
                 f"than {data['long_tokens']} tokens; that share bounds what any long-document strategy can gain "
                 "over truncation on data like this.")
    if len(names) < 2:
        return lines
    def cost(n):  # ties in accuracy go to the cheaper strategy
        return s[n]["relative_cost"]["inference"] or float("inf")

    best = max(names, key=lambda n: (s[n]["accuracy"], -cost(n)))
    runner = [n for n in names if n != best]
    lines.append(f"Most accurate overall: {best} ({_pct(s[best]['accuracy'])}"
                 f"{_ci(s[best]['accuracy_ci95'])}); " + _against(results, best, runner, "all") + ".")
    with_long = [n for n in names if s[n]["long"]["accuracy"] is not None]
    if with_long:
        best_long = max(with_long, key=lambda n: (s[n]["long"]["accuracy"], -cost(n)))
        lines.append(f"Most accurate on documents over {data['long_tokens']} tokens: {best_long} "
                     f"({_pct(s[best_long]['long']['accuracy'])} of {s[best_long]['long']['documents']}"
                     f"{_ci(s[best_long]['long']['ci95'])}); "
                     + _against(results, best_long, [n for n in names if n != best_long], "long") + ".")
        reference = "truncate" if "truncate" in names and best_long != "truncate" else next(
            (n for n in names if n != best_long), None)
        pair = _comparison(results, best_long, reference, "long") if reference else None
        if pair is not None:
            detectable = pair.get("detectable_difference")
            lines.append(
                f"Power on the long documents: {pair['n']} documents, of which {best_long} and {reference} disagree "
                f"on {pair['only_a_right'] + pair['only_b_right']}; at that size and disagreement the paired test "
                + (f"detects a true difference of {100 * detectable:.1f} accuracy points 80% of the time (α = 0.05); "
                   "smaller differences can go unseen." if detectable is not None else
                   "cannot reliably detect any difference: evaluate on more long documents "
                   "(data.test_min_tokens, data.max_test_documents)."))
    lines += _baseline_verdict(results)
    fastest = min(names, key=cost)
    costs = ", ".join(f"{s[n]['relative_cost']['inference']:.1f}× ({n})" for n in names
                      if n != fastest and s[n]["relative_cost"]["inference"])
    lines.append(f"Cheapest at inference: {fastest} ({_num(s[fastest]['speed']['documents_per_second'])} documents/s)"
                 + (f"; the others need {costs} its time per document" if costs else "") + ".")
    if best != fastest and s[best]["relative_cost"]["inference"]:
        significant = _p(results, best, fastest, "all") < 0.05
        lines.append(
            f"Choice: {best} gains {100 * (s[best]['accuracy'] - s[fastest]['accuracy']):.1f} accuracy points over "
            f"{fastest} for {s[best]['relative_cost']['inference']:.1f}× the inference time; "
            + ("that gain is unlikely to be noise (paired test p < 0.05)." if significant else
               "that gain is within the noise of this test set (paired test p ≥ 0.05): prefer the cheaper "
               f"{fastest} unless a larger evaluation says otherwise.")
        )
    elif best == fastest:
        lines.append(f"Choice: {best} is both the most accurate and the cheapest here.")
    return lines


def _comparison(results: dict, a: str, b: str, subset: str) -> dict | None:
    """The paired comparison of a and b on `subset` (all or long), oriented so that only_a_right counts a."""
    for c in results["comparisons"]:
        if {c["a"], c["b"]} == {a, b} and c["documents"] == subset:
            if c["a"] == a:
                return c
            return {**c, "a": a, "b": b, "only_a_right": c["only_b_right"], "only_b_right": c["only_a_right"]}
    return None


def _p(results: dict, a: str, b: str, subset: str) -> float:
    c = _comparison(results, a, b, subset)
    return 1.0 if c is None else c["p_value"]


def _baseline_verdict(results: dict) -> list[str]:
    """Whether each strategy beats the TF-IDF baseline, on all documents, said plainly."""
    base = results.get("baseline")
    if not base:
        return []
    names, s = results["strategy_order"], results["strategies"]
    groups: dict[str, list[str]] = {"better": [], "same": [], "worse": []}
    for n in names:
        p = _p(results, n, base["name"], "all")
        groups["same" if p >= 0.05 else "better" if s[n]["accuracy"] > base["accuracy"] else "worse"].append(
            f"{n} {100 * (s[n]['accuracy'] - base['accuracy']):+.1f} points, p = {p:.3g}")
    line = (f"Classical baseline (TF-IDF words+bigrams + logistic regression, C chosen on validation, trained in "
            f"{_seconds(base['train_seconds'])}): {_pct(base['accuracy'])}{_ci(base['accuracy_ci95'])}. ")
    parts = []
    if groups["better"]:
        parts.append("significantly better than it: " + "; ".join(groups["better"]))
    if groups["same"]:
        parts.append("not distinguishable from it: " + "; ".join(groups["same"]))
    if groups["worse"]:
        parts.append("significantly worse than it: " + "; ".join(groups["worse"]))
    line += ". ".join(p[0].upper() + p[1:] for p in parts) + "."
    if len(groups["better"]) < len(names):
        line += (" A strategy that does not beat this baseline has not earned its cost here: the baseline trains in "
                 "seconds and needs no GPU.")
    return [line]


def _against(results: dict, best: str, others: list[str], subset: str) -> str:
    parts = []
    for other in others:
        p = _p(results, best, other, subset)
        parts.append(f"vs {other} p = {p:.3g}{'' if p < 0.05 else ' (not significant)'}")
    return "paired McNemar test " + ", ".join(parts)


# ------------------------------------------------------------------------------------------------------------
# Blocks: ("h", level, text) ("p", segments) ("ul", [segments]) ("table", headers, rows) ("img", key, alt)
# ("quote", segments) ("code", text). Segments: a string, or a list of (text, style) with style None, "mark",
# "strong" or "code".


def build_blocks(results: dict) -> list[tuple]:
    from longbert.evaluation.command import MANY_CLASSES, TOP_CONFUSIONS, top_confusions

    names = results["strategy_order"]
    s = results["strategies"]
    data = results["data"]
    budget = results["budget"]
    splits = data.get("splits") or {}
    blocks: list[tuple] = [("h", 1, f"Which long-document strategy? {results['name']}")]
    sizes = ", ".join(f"{v['documents']:,} {k}" for k, v in splits.items()) if splits else "see results.json"
    steps = sorted(set(budget["steps"].values()))
    blocks.append(("p", (
        f"{len(names)} strategies ({', '.join(names)}) trained and evaluated on the same documents ({sizes} from "
        f"{data['path']}), the same backbone ({budget['backbone']}, {budget['finetune']} fine-tuning), seed "
        f"{budget['seed']} and budget ({budget['epochs']} epoch(s), batch {budget['batch_size']}, "
        f"{'/'.join(str(x) for x in steps)} optimisation steps each). Created {results['created']}."
    )))
    blocks += [("h", 2, "Verdict"), ("ul", verdict(results))]
    for note in results.get("notes", []):
        blocks.append(("p", [("Note: ", "strong"), (note, None)]))

    # The main table.
    counts = {b: s[names[0]]["by_length"].get(b, {}).get("documents", 0) for b in BUCKETS}
    headers = (["strategy", "accuracy (95% CI)", "macro-F1"] + [f"{BUCKET_TITLES[b]} (n={counts[b]})" for b in BUCKETS]
               + ["training time", "inference docs/s", "peak memory (added by inference)", "trainable parameters"])
    rows = []
    for n in names:
        r = s[n]
        rows.append([n, _pct(r["accuracy"]) + _ci(r["accuracy_ci95"]), f"{r['macro_f1']:.3f}"]
                    + [_pct(r["by_length"].get(b, {}).get("accuracy")) for b in BUCKETS]
                    + [_seconds(r["train_seconds"]), _num(r["speed"]["documents_per_second"]),
                       _memory(r["speed"]), f"{r['trainable_parameters']:,}"])
    base = results.get("baseline")
    if base:
        rows.append([f"{base['name']} (baseline)", _pct(base["accuracy"]) + _ci(base["accuracy_ci95"]),
                     f"{base['macro_f1']:.3f}"] + [_pct(base["by_length"].get(b, {}).get("accuracy")) for b in BUCKETS]
                    + [_seconds(base["train_seconds"]), "–", "–", "–"])
    blocks += [("h", 2, "Results on the test split"), ("p", _class_balance(data)), ("table", headers, rows)]
    kinds = {s[n]["speed"]["memory_kind"] for n in names}
    blocks.append(("p", (
        "Lengths are WordPiece tokens with [CLS]/[SEP]. Inference speed is the test-split pass of the kept model "
        f"(batch {s[names[0]]['eval_batch_size']}); peak memory is "
        f"{' / '.join(sorted(k for k in kinds if k))}"
        " (process_peak_rss: the whole process's peak resident memory during the pass, model and data included, "
        "measured after memory freed by earlier work was handed back; cuda_max_allocated: torch's GPU peak); in "
        "brackets, what the pass added to the memory in use before it. "
        "Timings on a shared machine vary by tens of percent between runs."
    )))

    if "accuracy_by_length" in results.get("plots", {}):
        blocks += [("h", 2, "Accuracy by document length"),
                   ("img", "accuracy_by_length", "accuracy by length bucket per strategy")]
    blocks += [("h", 2, "Speed and memory against document length")]
    if "speed_by_length" in results.get("plots", {}):
        blocks.append(("img", "speed_by_length", "throughput and peak memory against document length"))
    speed_rows = []
    for n in names:
        for b in BUCKETS:
            row = (s[n].get("speed_by_length") or {}).get(b) or {}
            if row.get("documents"):
                speed_rows.append([n, BUCKET_TITLES[b], str(row["documents"]), _num(row["mean_tokens"], 0),
                                   _num(row["documents_per_second"]), _num(row["tokens_per_second"], 0),
                                   _memory(row)])
    blocks.append(("table", ["strategy", "length", "documents timed", "mean tokens", "docs/s", "tokens/s",
                             "peak memory (added)"], speed_rows))

    blocks += [("h", 2, "Confusion matrices (rows: true label, columns: predicted)")]
    if "confusion_matrices" in results.get("plots", {}):
        blocks.append(("img", "confusion_matrices", "confusion matrix per strategy"))
    if results["problem_type"] != "multi_label":
        labels = results["label_names"]
        many = len(labels) > MANY_CLASSES
        if many:
            blocks.append(("p", (f"{len(labels)} classes: the plot holds the whole matrices; the tables list each "
                                 f"strategy's {TOP_CONFUSIONS} most frequent confusions (share: of the true class's "
                                 "test documents).")))
        for n in names:
            blocks.append(("p", [(n, "strong")]))
            matrix = s[n]["confusion_matrix"]
            if many:
                blocks.append(("table", ["true", "predicted", "documents", "share"],
                               [[c["true"], c["predicted"], str(c["count"]), _pct(c["share"])]
                                for c in top_confusions(matrix, labels)]))
            else:
                blocks.append(("table", ["true \\ predicted", *labels],
                               [[lab, *[str(v) for v in row]] for lab, row in zip(labels, matrix)]))

    blocks += [("h", 2, "Are the differences real?"), ("p", (
        "Paired on the same test documents: how often only one of two strategies was right, and the exact McNemar "
        "test's two-sided p-value (small p: the difference is unlikely to be chance)."))]
    blocks.append(("table", ["strategies", "documents", "n", "only the first right", "only the second right",
                             "p-value", "detectable difference"],
                   [[f"{c['a']} vs {c['b']}", "all" if c["documents"] == "all" else f">{data['long_tokens']} tokens",
                     str(c.get("n", "")), str(c["only_a_right"]), str(c["only_b_right"]), f"{c['p_value']:.3g}",
                     "–" if c.get("detectable_difference") is None else f"{100 * c['detectable_difference']:.1f} points"]
                    for c in results["comparisons"]]))
    blocks.append(("p", (
        "Detectable difference: the smallest true accuracy difference this paired test finds significant (α = 0.05) "
        "80% of the time, at this number of documents and this rate of disagreement (Connor's approximation for "
        "McNemar's test). A difference below it, significant or not, is not resolved by this test set.")))

    blocks += _error_blocks(results)

    blocks += [("h", 2, "Settings")]
    blocks.append(("table", ["strategy", "strategy settings", "run folder", "run"],
                   [[n, _settings(s[n]["settings"]), s[n]["run_dir"], s[n]["status"]] for n in names]))
    blocks.append(("p", (
        f"Base recipe: {results['base_recipe']}; overrides: {', '.join(results['overrides']) or 'none'}. "
        f"Learning rate {budget['learning_rate']}, gradient accumulation {budget['gradient_accumulation']}, "
        f"max_steps {budget['max_steps']}. Each run folder holds the resolved recipe.yaml and the kept model "
        "(`longbert predict <run folder>`)."
    )))
    machine = results["machine"]
    hardware = machine.get("gpu") or machine.get("cpu")
    blocks += [("h", 2, "Machine and command"), ("ul", [
        f"Device: {hardware}" + (f" ({machine.get('gpus')} GPU(s); CPU {machine.get('cpu')})" if machine.get("gpu") else
                                 f" ({machine.get('cpu_threads')} threads)"),
        f"torch {machine.get('torch')}, Python {machine.get('python')}, longbert {results['longbert_version']}",
        "mixed precision: " + ", ".join(f"{n} {s[n]['mixed_precision']}" for n in names),
    ]), ("code", results["command"])]
    return blocks


def _error_blocks(results: dict) -> list[tuple]:
    analysis = results["error_analysis"]
    examples = analysis["examples"]
    blocks: list[tuple] = [("h", 2, f"Error analysis: long documents (>{analysis['long_tokens']} tokens) one strategy "
                                    "gets right and another gets wrong")]
    if not examples:
        blocks.append(("p", "No long test document was classified correctly by one strategy and wrongly by another."))
        return blocks
    blocks.append(("p", (
        "The most confident mistakes first, taking turns between pairs of strategies. The decisive part is "
        "highlighted: for strategies that pool several chunks or windows, the unit that weighed most in the pooled "
        "decision (its pooling weight), or, where all units weigh the same (mean pooling), the unit whose removal "
        "lowers the predicted class's probability most; for truncation, the tokens it kept.")))
    for number, ex in enumerate(examples, 1):
        capped = ""
        if ex["read_tokens"] < ex["n_tokens"] - 2:
            capped = f" (the first {ex['read_tokens']:,} read: data.max_document_tokens)"
        blocks.append(("h", 3, f"Example {number}: test document {ex['index']}, {ex['n_tokens']:,} tokens{capped}, "
                               f"true label {ex['label']}"))
        rows = []
        for n, entry in ex["strategies"].items():
            p = entry["probability_of_truth"]
            rows.append([n, f"{entry['predicted']} {'✓' if entry['correct'] else '✗'}",
                         "n/a" if p is None else f"{p:.2f}", decisive_text(entry["decisive"])])
        blocks.append(("table", ["strategy", "predicted", "p(true label)", "decisive part"], rows))
        for n, entry in ex["strategies"].items():
            if entry.get("excerpt"):
                blocks.append(("p", [(f"{n}", "strong"), (f" ({'right' if entry['correct'] else 'wrong'}), "
                                                           f"{decisive_text(entry['decisive'])}:", None)]))
                segments = [(seg["text"], "mark" if seg["highlight"] else None) for seg in entry["excerpt"]]
                blocks.append(("quote", segments))
    return blocks


def decisive_text(d: dict | None) -> str:
    if not d or d.get("method") is None:
        return (d or {}).get("note", "n/a")
    ranges = " + ".join(f"tokens {a + 1:,}–{b:,}" for a, b in d["spans"])  # 1-based, inclusive
    if d["method"] == "kept":
        return f"saw only {ranges}"
    what = f"unit {d['unit'] + 1} of {d['units']} ({ranges})"
    if d["method"] == "weight":
        return f"{what}, pooling weight {d['value']:.2f}"
    return f"{what}; leaving it out lowers p(predicted) by {d['value']:.3f}"


# ------------------------------------------------------------------------------------------------------------
# Rendering


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
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------------------------------------------------
# Plots (matplotlib, Agg backend: no display needed)


def make_plots(results: dict) -> dict[str, bytes]:
    """{plot key: PNG bytes} for the plots the results allow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from longbert.evaluation.command import MANY_CLASSES, draw_confusion_matrix

    names = results["strategy_order"]
    s = results["strategies"]
    plots = {}
    colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}

    # Accuracy by length bucket: grouped bars, the overall accuracy first.
    fig, ax = plt.subplots(figsize=(8, 4))
    groups = ["all", *BUCKETS]
    shown = {n: s[n] for n in names}
    base = results.get("baseline")
    if base:
        shown[f"{base['name']} (baseline)"] = base
        colours[f"{base['name']} (baseline)"] = "0.6"
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
    plots["accuracy_by_length"] = _png(fig)

    # Throughput and peak memory against the mean length of each bucket's timed documents.
    if any(s[n].get("speed_by_length") for n in names):
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
        plots["speed_by_length"] = _png(fig)

    # A confusion matrix per strategy (single-label only); with many classes each panel grows and wraps to rows.
    if results["problem_type"] != "multi_label":
        labels = results["label_names"]
        side = 3.2 if len(labels) <= MANY_CLASSES else min(3.2 + 0.3 * len(labels), 12)
        columns = len(names) if len(labels) <= MANY_CLASSES else min(len(names), 2)
        rows = -(-len(names) // columns)
        fig, axes = plt.subplots(rows, columns, figsize=(side * columns + 0.5, (side + 0.2) * rows), squeeze=False)
        for ax, n in zip(axes.flat, names):
            draw_confusion_matrix(ax, s[n]["confusion_matrix"], labels, n)
        for ax in list(axes.flat)[len(names):]:
            ax.set_visible(False)
        fig.tight_layout()
        plots["confusion_matrices"] = _png(fig)
    return plots


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


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
        table.add_row(n, _pct(r["accuracy"]), f"{r['macro_f1']:.3f}",
                      *[_pct(r["by_length"].get(b, {}).get("accuracy")) for b in BUCKETS],
                      _seconds(r["train_seconds"]), _num(r["speed"]["documents_per_second"]),
                      _num(r["speed"]["peak_memory_mb"], 0), f"{r['trainable_parameters'] / 1e6:.1f}M")
    base = results.get("baseline")
    if base:
        table.add_row(f"{base['name']} (baseline)", _pct(base["accuracy"]), f"{base['macro_f1']:.3f}",
                      *[_pct(base["by_length"].get(b, {}).get("accuracy")) for b in BUCKETS],
                      _seconds(base["train_seconds"]), "–", "–", "–")
    console.print(table)
    for line in verdict(results):
        console.print(f"• {line}", highlight=False)
    runs = ", ".join(f"{n} {s[n]['status']}" for n in names)
    console.print(f"runs ({runs}): {Path(s[names[0]]['run_dir']).parent}/", highlight=False)
    report = results.get("report", {})
    if report:
        console.print(f"report: {report['folder']}/ (report.md, report.html, results.json)", highlight=False)
