"""The comparison report's content, built once as a list of blocks from the results dict and rendered twice
(Markdown and HTML, see `render`), so both pages always say the same.

Blocks: ("h", level, text) ("p", segments) ("ul", [segments]) ("table", headers, rows) ("img", plot key, alt)
("quote", segments) ("code", text). Segments: a string, or a list of (text, style) with style None, "mark",
"strong" or "code"."""

from __future__ import annotations

from longbert.comparison.formatting import (
    combined_label,
    combined_rows,
    confidence,
    duration,
    interval,
    labelled_rows,
    mean_sd,
    memory,
    number,
    percent,
    shown_buckets,
)
from longbert.comparison.training_cost import training_cost_blocks
from longbert.comparison.verdict import deployed_abstention, verdict
from longbert.config import is_multi_label
from longbert.data.lengths import BUCKET_NAMES, BUCKET_TITLES
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
    blocks += [block for part in LATER_SECTIONS for block in part(results)]
    return blocks


def _before_after(section: dict, key: str, shown=lambda value: f"{value:.3f}") -> str:
    """'0.058 → 0.011': a calibration measure before and after the row's calibration, or its one value."""
    before = section.get("uncalibrated")
    return shown(section[key]) if not before else f"{shown(before[key])} → {shown(section[key])}"


def _ece_of(section: dict, key: str, name: str) -> str:
    """The ECE of one entry of a calibration section's `key` (a length bucket, a label), before → after."""
    before = section.get("uncalibrated")
    return _before_after({**section[key][name], "uncalibrated": before and before[key][name]}, "ece")


def _calibration_blocks(results: dict) -> list[tuple]:
    """ECE, NLL, Brier score and mean confidence of every row that has them (before → after its calibration), ECE by
    length bucket, and the reliability diagrams. Nothing for a report from before they were measured."""
    rows = {label: row for label, row in labelled_rows(results).items() if row.get("calibration")}
    if not rows:
        return []
    buckets = shown_buckets(results)
    table = [[label, percent(row["accuracy"]), _before_after(row["calibration"], "mean_confidence", percent),
              *[_before_after(row["calibration"], key) for key in ("ece", "nll", "brier")]]
             for label, row in rows.items()]
    by_length = [[label, *[_ece_of(row["calibration"], "by_length", b) if row["calibration"]["by_length"].get(
        b, {}).get("documents") else "n/a" for b in buckets]] for label, row in rows.items()]
    counts = {b: next(iter(rows.values()))["calibration"]["by_length"].get(b, {}).get("documents", 0) for b in buckets}
    blocks: list[tuple] = [("h", 2, "Can its probabilities be trusted? Calibration on the test split"), ("p", (
        "A model that says 90% should be right 90% of the time. ECE (expected calibration error) is the mean gap "
        "between how sure a row was and how often it was right, over 15 confidence bins weighted by documents: 0 is "
        "perfect. NLL (negative log-likelihood) and the Brier score weigh every probability; lower is better. "
        "Before → after: the probabilities before the row's calibration (temperature scaling fitted on validation, "
        "kept where it lowered held-out NLL) and those it answers; one value: a row answers its probabilities as "
        "they are.")),
        ("table", ["row", "accuracy", "mean confidence", "ECE", "NLL", "Brier score"], table),
        ("h", 3, "ECE by document length"),
        ("table", ["row", *[f"{BUCKET_TITLES[b]} (n={counts[b]})" for b in buckets]], by_length)]
    blocks += _per_label_blocks(rows)
    if "reliability" in results.get("plots", {}):
        blocks.append(("img", "reliability", "reliability diagrams: accuracy against confidence, before and after "
                                             "calibration, with each bin's documents"))
    return blocks


def _per_label_blocks(rows: dict[str, dict]) -> list[tuple]:
    """Multi-label rows: each label's ECE (its yes/no decisions) per row, before → after its calibration."""
    rows = {label: row["calibration"] for label, row in rows.items() if "per_label" in row["calibration"]}
    if not rows:
        return []
    return [("h", 3, "ECE by label (each label's yes/no decisions)"),
            ("table", ["label", *rows], [[name, *[_ece_of(section, "per_label", name) for section in rows.values()]]
                                         for name in next(iter(rows.values()))["per_label"]])]


def _abstention_blocks(results: dict) -> list[tuple]:
    """The confidence threshold each row needs to reach the target accuracy, chosen on validation, and what it
    answers on test; the coverage curves. Nothing for a report from before abstention was measured."""
    rows = {label: row for label, row in labelled_rows(results).items() if "abstention" in row}
    if not rows:
        return []
    target = percent(results["target_accuracy"])
    table = [[label, *_abstention_cells(row["abstention"], target)] for label, row in rows.items()]
    blocks: list[tuple] = [("h", 2, "Abstention: answer the sure documents, send the rest to a person"), ("p", (
        f"For each row, the lowest confidence at which it still reaches {target} accuracy on the validation split "
        "(answering as many validation documents as it can at that accuracy), then applied to the test split: the "
        "test columns are what to expect, as the threshold was not chosen on them. Confidence: the probability of "
        "the label the row gives.")),
        ("table", ["row", "answer when confidence ≥ (chosen on validation)", "validation: answered, accuracy",
                   "test: answered", "test: accuracy"], table)]
    short = [label for label, row in rows.items() if ((row["abstention"] or {}).get("test") or {}).get("accuracy")
             is not None and row["abstention"]["test"]["accuracy"] < results["target_accuracy"]]
    if short:
        blocks.append(("p", [(
            f"On test, {', '.join(short)} fall{'s' if len(short) == 1 else ''} short of {target} at the threshold: it "
            "is only as good as the validation split it was chosen on (a few hundred documents, say, or documents "
            "unlike the test's: the data section says what each holds).", None)]))
    said = deployed_abstention(results)
    if said:
        blocks.append(("p", [(f"The model to deploy, {results['deployable']['row']}.", "strong"), (f" {said}", None)]))
    if "coverage" in results.get("plots", {}):
        blocks += [("p", ("Accuracy on the test documents a row answers when it answers only its surest ones; the "
                          "star: at the threshold chosen on validation.")),
                   ("img", "coverage", "accuracy against the share of documents answered")]
    return blocks


def _abstention_cells(chosen: dict | None, target: str) -> list[str]:
    """A row's threshold, validation share and accuracy, test share and accuracy, as the abstention table says them."""
    if chosen is None:
        return ["n/a (no validation predictions kept)", "–", "–", "–"]
    if chosen["threshold"] is None:
        return [f"none: no share of validation documents reaches {target}", "–", "–", "–"]
    validation, test = chosen["validation"], chosen["test"]
    return [confidence(chosen["threshold"]),
            f"{percent(validation['coverage'])} ({validation['answered']:,} of {validation['documents']:,}), "
            f"{percent(validation['accuracy'])}",
            f"{percent(test['coverage'])} ({test['answered']:,} of {test['documents']:,})", percent(test["accuracy"])]


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
        for b in BUCKET_NAMES:
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


# The sections after the main table, in the page's order (each results -> blocks).
LATER_SECTIONS = (_calibration_blocks, _abstention_blocks, _speed_blocks, training_cost_blocks, _confusion_blocks,
                  _paired_test_blocks, _error_blocks, _settings_blocks)
