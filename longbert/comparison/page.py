"""The comparison report's content, built once as a list of blocks from the results dict and rendered twice
(Markdown and HTML, see `render`), so both pages always say the same.

Blocks: ("h", level, text) ("p", segments) ("ul", [segments]) ("table", headers, rows) ("img", plot key, alt)
("quote", segments) ("code", text). Segments: a string, or a list of (text, style) with style None, "mark",
"strong" or "code"."""

from __future__ import annotations

from longbert.comparison.formatting import (
    BUCKET_TITLES,
    BUCKETS,
    combined_label,
    combined_rows,
    duration,
    interval,
    mean_sd,
    memory,
    number,
    percent,
    shown_buckets,
)
from longbert.comparison.verdict import verdict
from longbert.config import is_multi_label
from longbert.evaluation.metrics import MANY_CLASSES, TOP_CONFUSIONS, top_confusions
from longbert.inference.attribution import decisive_text


def build_blocks(results: dict) -> list[tuple]:
    """The whole report page: verdict, results table, plots, speed, confusion matrices, paired tests, error
    analysis, settings, machine and command."""
    names = results["strategy_order"]
    s = results["strategies"]
    data = results["data"]
    budget = results["budget"]
    blocks: list[tuple] = [("h", 1, f"Which long-document strategy? {results['name']}")]
    sizes = _split_sizes(data.get("splits") or {})
    steps = sorted(set(budget["steps"].values()))
    blocks.append(("p", (
        f"{len(names)} {'strategy' if len(names) == 1 else 'strategies'} ({', '.join(names)}) trained and "
        f"evaluated on the same documents ({sizes} from "
        f"{data['path']}), the same backbone ({budget['backbone']}, {budget['finetune']} fine-tuning), "
        f"{_seeds_text(budget)} and budget ({budget['epochs']} epoch(s), batch {budget['batch_size']}, "
        f"{'/'.join(str(x) for x in steps)} optimisation steps each). Created {results['created']}."
    )))
    blocks += [("h", 2, "Verdict"), ("ul", verdict(results))]
    for note in results.get("notes", []):
        blocks.append(("p", [("Note: ", "strong"), (note, None)]))

    # The main table.
    buckets = shown_buckets(results)
    counts = {b: s[names[0]]["by_length"][b]["documents"] for b in buckets}
    headers = (["strategy", "accuracy (95% CI)", "macro-F1"] + [f"{BUCKET_TITLES[b]} (n={counts[b]})" for b in buckets]
               + ["training time", "inference docs/s", "peak memory (added by inference)", "trainable parameters"])
    rows = []
    for n in names:
        r = s[n]
        rows.append([n, percent(r["accuracy"]) + interval(r["accuracy_ci95"]), f"{r['macro_f1']:.3f}"]
                    + [percent(r["by_length"].get(b, {}).get("accuracy")) for b in buckets]
                    + [duration(r["train_seconds"]), number(r["speed"]["documents_per_second"]),
                       memory(r["speed"]), f"{r['trainable_parameters']:,}"])
    for combined in combined_rows(results):
        rows.append([combined_label(combined), percent(combined["accuracy"]) + interval(combined["accuracy_ci95"]),
                     f"{combined['macro_f1']:.3f}"]
                    + [percent(combined["by_length"].get(b, {}).get("accuracy")) for b in buckets]
                    + ["none (its members')", "–", "–", "–"])
    base = results.get("baseline")
    if base:
        rows.append([f"{base['name']} (baseline)", percent(base["accuracy"]) + interval(base["accuracy_ci95"]),
                     f"{base['macro_f1']:.3f}"]
                    + [percent(base["by_length"].get(b, {}).get("accuracy")) for b in buckets]
                    + [duration(base["train_seconds"]), "–", "–", "–"])
    blocks += [("h", 2, "Results on the test split"), ("p", _class_balance(data)), ("table", headers, rows)]
    blocks += _seed_blocks(results)
    blocks += _group_blocks(results)
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
    blocks += _speed_blocks(results) + _confusion_blocks(results) + _paired_test_blocks(results)
    blocks += _error_blocks(results) + _settings_blocks(results)
    return blocks


def _speed_blocks(results: dict) -> list[tuple]:
    names, s = results["strategy_order"], results["strategies"]
    blocks: list[tuple] = []
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
                speed_rows.append([n, BUCKET_TITLES[b], str(row["documents"]), number(row["mean_tokens"], 0),
                                   number(row["documents_per_second"]), number(row["tokens_per_second"], 0),
                                   memory(row)])
    blocks.append(("table", ["strategy", "length", "documents timed", "mean tokens", "docs/s", "tokens/s",
                             "peak memory (added)"], speed_rows))
    return blocks


def _confusion_blocks(results: dict) -> list[tuple]:
    names, s = results["strategy_order"], results["strategies"]
    blocks: list[tuple] = [("h", 2, "Confusion matrices (rows: true label, columns: predicted)")]
    if "confusion_matrices" in results.get("plots", {}):
        blocks.append(("img", "confusion_matrices", "confusion matrix per strategy"))
    if is_multi_label(results["problem_type"]):
        return blocks
    labels = results["label_names"]
    many = len(labels) > MANY_CLASSES
    if many:
        blocks.append(("p", (f"{len(labels)} classes: the plot holds the whole matrices; the tables list each "
                             f"strategy's {TOP_CONFUSIONS} most frequent confusions (share: of the true class's "
                             "test documents).")))
    if not many and "confusion_matrices" in results.get("plots", {}):
        return blocks  # the plot shows every cell's count; tables of the same numbers would repeat it
    for n in names:
        blocks.append(("p", [(n, "strong")]))
        matrix = s[n]["confusion_matrix"]
        if many:
            blocks.append(("table", ["true", "predicted", "documents", "share"],
                           [[c["true"], c["predicted"], str(c["count"]), percent(c["share"])]
                            for c in top_confusions(matrix, labels)]))
        else:
            blocks.append(("table", ["true \\ predicted", *labels],
                           [[lab, *[str(v) for v in row]] for lab, row in zip(labels, matrix)]))
    return blocks


def _paired_test_blocks(results: dict) -> list[tuple]:
    long_tokens = results["data"]["long_tokens"]
    every = {(c["a"], c["b"]): c.get("n") for c in results["comparisons"] if c["documents"] == "all"}
    # Where every test document is long, the test on the long ones is the test on all of them: shown once.
    same = {pair for pair, n in every.items() if any((c["a"], c["b"]) == pair and c["documents"] != "all" and
                                                     c.get("n") == n for c in results["comparisons"])}
    rows = [[f"{c['a']} vs {c['b']}",
             (f"all (every one >{long_tokens} tokens)" if (c["a"], c["b"]) in same else "all")
             if c["documents"] == "all" else f">{long_tokens} tokens",
             str(c.get("n", "")), str(c["only_a_right"]), str(c["only_b_right"]), f"{c['p_value']:.3g}",
             "–" if c.get("detectable_difference") is None else f"{100 * c['detectable_difference']:.1f} points"]
            for c in results["comparisons"] if c["documents"] == "all" or (c["a"], c["b"]) not in same]
    return [("h", 2, "Are the differences real?"), ("p", (
        "Paired on the same test documents: how often only one of two strategies was right, and the exact McNemar "
        "test's two-sided p-value (small p: the difference is unlikely to be chance).")),
        ("table", ["strategies", "documents", "n", "only the first right", "only the second right", "p-value",
                   "detectable difference"], rows),
        ("p", (
            "Detectable difference: the smallest true accuracy difference this paired test finds significant "
            "(α = 0.05) at least 80% of the time, at this number of documents and this rate of disagreement (the "
            "power of the exact test above, not of a normal approximation). A difference below it, significant or "
            "not, is not resolved by this test set."))]


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
    for position, ex in enumerate(examples, 1):
        capped = ""
        if ex["read_tokens"] < ex["n_tokens"] - 2:
            capped = f" (the first {ex['read_tokens']:,} read: data.max_document_tokens)"
        blocks.append(("h", 3, f"Example {position}: test document {ex['index']}, {ex['n_tokens']:,} tokens{capped}, "
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


def _settings_blocks(results: dict) -> list[tuple]:
    names, s, budget = results["strategy_order"], results["strategies"], results["budget"]
    blocks: list[tuple] = [("h", 2, "Settings")]
    blocks.append(("table", ["strategy", "strategy settings", "run folder", "run"],
                   [[n, _settings(s[n]["settings"]), s[n]["run_dir"], s[n]["status"]] for n in names]))
    step_cap = "" if budget["max_steps"] is None else f", at most {budget['max_steps']} optimisation steps"
    blocks.append(("p", (
        f"Base recipe: {results['base_recipe']}; overrides: {', '.join(results['overrides']) or 'none'}. "
        f"Learning rate {budget['learning_rate']}, gradient accumulation {budget['gradient_accumulation']}"
        f"{step_cap}. Each run folder holds the resolved recipe.yaml and the kept model (`longbert predict <run "
        "folder>`)."
    )))
    machine = results["machine"]
    hardware = machine.get("gpu") or machine.get("cpu")
    device = (f" ({machine.get('gpus')} GPU(s); CPU {machine.get('cpu')})" if machine.get("gpu") else
              f" ({machine.get('cpu_threads')} threads)")
    blocks += [("h", 2, "Machine and command"), ("ul", [
        f"Device: {hardware}" + device,
        f"torch {machine.get('torch')}, Python {machine.get('python')}, longbert {results['longbert_version']}",
        "mixed precision: " + ", ".join(f"{n} {s[n]['mixed_precision']}" for n in names),
    ]), ("code", results["command"])]
    return blocks


def _split_sizes(splits: dict) -> str:
    """'200 validation, 100 train (and 1,572 pseudo-labelled by a teacher), 2,000 test' from the runs' data stats."""
    if not splits:
        return "see results.json"
    return ", ".join(f"{v['documents']:,} {k}" + (f" (and {v['pseudo_labelled']:,} pseudo-labelled by a teacher)"
                                                  if v.get("pseudo_labelled") else "") for k, v in splits.items())


def _seeds_text(budget: dict) -> str:
    """'seed 42', or 'seeds 42–46 (each strategy's own row: seed 42)'."""
    seeds = budget.get("seeds") or [budget["seed"]]
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"seeds {seeds[0]}–{seeds[-1]} (each strategy's own row: seed {budget['seed']})"


def _seed_blocks(results: dict) -> list[tuple]:
    """With several seeds: per strategy, the single runs' mean ± sd and range, beside their averaged row."""
    rows = results.get("seed_ensembles") or []
    if not rows:
        return []
    long_tokens = results["data"]["long_tokens"]
    headers = ["strategy", "seeds", "accuracy, single runs (mean ± sd)", "range", "macro-F1 (mean ± sd)",
               f"over {long_tokens} tokens (mean ± sd)", "seeds averaged", f"averaged, over {long_tokens} tokens"]
    table = [[r["strategy"], ", ".join(str(k) for k in r["seeds"]), mean_sd(r["spread"]["accuracy"]),
              f"{percent(r['spread']['accuracy']['min'])}–{percent(r['spread']['accuracy']['max'])}",
              mean_sd(r["spread"]["macro_f1"], share=False), mean_sd(r["spread"]["long_accuracy"]),
              percent(r["accuracy"]) + interval(r["accuracy_ci95"]), percent(r["long"]["accuracy"])] for r in rows]
    return [("h", 3, "Across seeds"), ("p", (
        "Each strategy trained at every seed on the same documents (only initialisation, order and dropout differ): "
        "the spread of the single runs, and the run whose test probabilities are their average (its own row above, "
        "paired against every other row). sd is the sample standard deviation over seeds.")),
        ("table", headers, table)]


def _group_blocks(results: dict) -> list[tuple]:
    """Accuracy per group of test documents, when their ids name groups (a probe's depth-0600-000123)."""
    by_group = results.get("by_group")
    if not by_group:
        return []
    groups = by_group["groups"]
    labels = {n: n for n in by_group["accuracy"]}
    for combined in combined_rows(results):
        labels[combined["name"]] = combined_label(combined)
    if results.get("baseline"):
        labels[results["baseline"]["name"]] = f"{results['baseline']['name']} (baseline)"
    headers = ["row"] + [f"{g} (n={by_group['documents'][g]})" for g in groups]
    rows = [[labels[n]] + [percent(accuracy[g]) for g in groups] for n, accuracy in by_group["accuracy"].items()]
    return [("h", 3, "Accuracy by document group"), ("p", (
        "The test documents' ids name groups (the id up to its last '-'), as a probe's ids name where its evidence "
        "lies: accuracy in each group.")), ("table", headers, rows)]


def _class_balance(data: dict) -> str:
    """'Test documents per class: neg 314 (50.0%), pos 314 (50.0%); over 512 tokens: ...' (per label, multi-label)."""
    def shares(counts: dict, total: int) -> str:
        return ", ".join(f"{n} {c:,} ({percent(c / total if total else None)})" for n, c in counts.items())

    if not data.get("class_counts"):
        return "Class balance: see results.json."
    return (f"Test documents per class: {shares(data['class_counts'], data['test_documents'])}; over "
            f"{data['long_tokens']} tokens: {shares(data['long_class_counts'], data['long_documents'])}.")


def _settings(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items() if k != "name") or "defaults"
