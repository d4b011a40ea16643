"""The verdict of a comparison, decided from its results dict (`report_numbers.assemble_results`): which strategy is the
most accurate overall and on long documents, which differences the paired tests call real, how small a difference
the long documents could reveal, where each strategy stands against the TF-IDF baseline, which is cheapest, and
the choice between accuracy and cost. `decide` gives the decisions as data; `verdict` says them in a few sentences,
the same in the report and in the terminal."""

from __future__ import annotations

from dataclasses import dataclass, field

from longbert.comparison.formatting import (
    combined_label,
    combined_rows,
    confidence,
    duration,
    interval,
    mean_sd,
    number,
    percent,
    report_rows,
)
from longbert.comparison.statistics import holm
from longbert.strategies.registry import strategy_with_role

ALPHA = 0.05  # a paired test's p-value, Holm-adjusted within its family, below this counts as a real difference
CORRECTION = ("Every p-value in this verdict is an exact McNemar test Holm-adjusted within its family (one row "
              "against each row it is compared with here; every row against the baseline), so a difference called "
              "significant survives the multiple comparisons; the paired-test table gives the unadjusted values.")


@dataclass
class Verdict:
    """What a comparison decided. Names are the results' strategy names; None where too few strategies (or no long
    documents) leave nothing to decide."""

    best: str | None = None  # the most accurate overall; ties go to the cheaper at inference
    best_long: str | None = None  # the most accurate on the long documents
    # What best_long is measured against on the long documents: the registry's reference strategy when it was
    # compared (and is not best_long itself), else the first other strategy.
    reference: str | None = None
    power: dict | None = None  # the paired comparison of best_long and reference on the long documents
    fastest: str | None = None  # the cheapest at inference
    gain_is_real: bool | None = None  # best's gain over fastest passes the paired test (None: nothing to weigh)
    # Each strategy (and ensemble or hybrid row) against the baseline on all documents: "better", "same" (not
    # distinguishable) or "worse".
    against_baseline: dict[str, str] = field(default_factory=dict)


def paired(results: dict, a: str, b: str, subset: str) -> dict | None:
    """The paired comparison of a and b on `subset` ("all" or "long"), oriented so that only_a_right counts a."""
    for c in results["comparisons"]:
        if {c["a"], c["b"]} == {a, b} and c["documents"] == subset:
            if c["a"] == a:
                return c
            return {**c, "a": a, "b": b, "only_a_right": c["only_b_right"], "only_b_right": c["only_a_right"]}
    return None


def p_value(results: dict, a: str, b: str, subset: str) -> float:
    """The exact McNemar p-value of a against b on `subset`; 1 when the pair was not tested."""
    c = paired(results, a, b, subset)
    return 1.0 if c is None else c["p_value"]


def adjusted_p_values(results: dict, row: str, others: list[str], subset: str) -> dict[str, float]:
    """{other: the p-value of row against other on `subset`, Holm-adjusted over the family of `others`}."""
    return holm({other: p_value(results, row, other, subset) for other in others})


def inference_cost(results: dict, name: str) -> float:
    """A strategy's inference time relative to the cheapest; infinite when unknown (it never wins a tie)."""
    return results["strategies"][name]["relative_cost"]["inference"] or float("inf")


def accuracy_of(results: dict, name: str) -> float:
    """The test accuracy of a strategy or of a combined row (ensemble, hybrid, a strategy's seeds averaged)."""
    if name in results["strategies"]:
        return results["strategies"][name]["accuracy"]
    return next(r for r in combined_rows(results) if r["name"] == name)["accuracy"]


def decide(results: dict) -> Verdict:
    """The decisions behind the verdict (see `Verdict`)."""
    names, s = results["strategy_order"], results["strategies"]
    decision = Verdict()
    base = results.get("baseline")
    if base:
        for n, p in baseline_p_values(results).items():
            decision.against_baseline[n] = ("same" if p >= ALPHA else
                                            "better" if accuracy_of(results, n) > base["accuracy"] else "worse")
    if len(names) < 2:
        return decision
    decision.best = max(names, key=lambda n: (s[n]["accuracy"], -inference_cost(results, n)))
    with_long = [n for n in names if s[n]["long"]["accuracy"] is not None]
    if with_long:
        best_long = max(with_long, key=lambda n: (s[n]["long"]["accuracy"], -inference_cost(results, n)))
        reference = strategy_with_role("reference")
        if reference not in names or reference == best_long:
            reference = next((n for n in names if n != best_long), None)
        decision.best_long, decision.reference = best_long, reference
        decision.power = paired(results, best_long, reference, "long") if reference else None
    decision.fastest = min(names, key=lambda n: inference_cost(results, n))
    if decision.best != decision.fastest and s[decision.best]["relative_cost"]["inference"]:
        others = [n for n in names if n != decision.best]
        decision.gain_is_real = adjusted_p_values(results, decision.best, others, "all")[decision.fastest] < ALPHA
    return decision


def baseline_p_values(results: dict) -> dict[str, float]:
    """{row: its p-value against the baseline on all documents}, Holm-adjusted over every strategy and combined row."""
    rows = [*results["strategy_order"], *(r["name"] for r in combined_rows(results))]
    return holm({n: p_value(results, n, results["baseline"]["name"], "all") for n in rows})


def verdict(results: dict) -> list[str]:
    """A few sentences answering 'which strategy, and at what cost', hedged by the paired tests."""
    names, s, data = results["strategy_order"], results["strategies"], results["data"]
    decision = decide(results)
    share = data["long_documents"] / data["test_documents"] if data["test_documents"] else 0
    lines = [f"{data['long_documents']} of {data['test_documents']} test documents ({percent(share)}) are longer "
             f"than {data['long_tokens']} tokens; that share bounds what any long-document strategy can gain "
             "over truncation on data like this."]
    if decision.best is None:  # one strategy: nothing to choose between, but the baseline and combined rows stand
        tested = _baseline_sentences(results, decision) + _combined_sentences(results)
        return lines + tested + _deployable_sentences(results, decision) + ([CORRECTION] if tested else [])
    best, best_long, fastest = decision.best, decision.best_long, decision.fastest
    lines.append(f"Most accurate overall: {best} ({percent(s[best]['accuracy'])}"
                 f"{interval(s[best]['accuracy_ci95'])}); " + _against(results, best, "all") + ".")
    if best_long is not None:
        lines.append(f"Most accurate on documents over {data['long_tokens']} tokens: {best_long} "
                     f"({percent(s[best_long]['long']['accuracy'])} of {s[best_long]['long']['documents']}"
                     f"{interval(s[best_long]['long']['ci95'])}); " + _against(results, best_long, "long") + ".")
    pair = decision.power
    if pair is not None:
        detectable = pair.get("detectable_difference")
        lines.append(
            f"Power on the long documents: {pair['n']} documents, of which {best_long} and {decision.reference} "
            f"disagree on {pair['only_a_right'] + pair['only_b_right']}; at that size and disagreement the paired test "
            + (f"detects a true difference of {100 * detectable:.1f} accuracy points 80% of the time (α = 0.05); "
               "smaller differences can go unseen." if detectable is not None else
               "cannot reliably detect any difference: evaluate on more long documents "
               "(data.test_longer_than, data.max_test_documents)."))
    lines += _baseline_sentences(results, decision)
    lines += _combined_sentences(results)
    costs = ", ".join(f"{s[n]['relative_cost']['inference']:.1f}× ({n})" for n in names
                      if n != fastest and s[n]["relative_cost"]["inference"])
    lines.append(f"Cheapest at inference: {fastest} ({number(s[fastest]['speed']['documents_per_second'])} "
                 "documents/s)" + (f"; the others need {costs} its time per document" if costs else "") + ".")
    # One verdict: where compare chose a model to deploy (on validation, the sentence after this), this line says
    # what the test shows of the cost and gain and recommends nothing of its own.
    deploys = results.get("deployable")
    if decision.gain_is_real is not None:
        within = "that gain is within the noise of this test set (Holm-adjusted paired test p ≥ 0.05)"
        lines.append(
            f"Choice: {best} gains {100 * (s[best]['accuracy'] - s[fastest]['accuracy']):.1f} accuracy points over "
            f"{fastest} for {s[best]['relative_cost']['inference']:.1f}× the inference time; "
            + ("that gain is unlikely to be noise (Holm-adjusted paired test p < 0.05)." if decision.gain_is_real
               else f"{within}; the test cannot tell them apart." if deploys
               else f"{within}: prefer the cheaper {fastest} unless a larger evaluation says otherwise.")
        )
    elif best == fastest:
        lines.append(f"Choice: {best} is both the most accurate and the cheapest here."
                     if not deploys or deploys["row"] == best else
                     f"Choice: on test, {best} is both the most accurate and the cheapest strategy trained; the model "
                     "to deploy is chosen on validation, not on test.")
    return lines + _deployable_sentences(results, decision) + [CORRECTION]


def _deployable_sentences(results: dict, decision: Verdict) -> list[str]:
    """The model to deploy: the row chosen on validation (compare's `deployable`), its folder, its test accuracy,
    and whether it beats the baseline after the correction; called a winner only when it does."""
    chosen = results.get("deployable")
    if not chosen:
        return []
    row, metric = chosen["row"], chosen["metric"].replace("macro_f1", "macro-F1")
    line = (f"Model to deploy, chosen on validation {metric} (not on test) among {len(chosen['validation'])} rows: "
            f"{row} ({metric} {number(chosen['validation'][row], 3)} on validation, "
            f"{percent(accuracy_of(results, row))} on test), saved as a model folder that longbert predict loads: "
            f"{chosen['folder']}.")
    standing = decision.against_baseline.get(row)
    if standing is not None:
        p = baseline_p_values(results)[row]
        line += (f" It beats the {results['baseline']['name']} baseline (Holm-adjusted p = {p:.3g}): the "
                 "winner." if standing == "better" else
                 f" It does not beat the {results['baseline']['name']} baseline after the correction (Holm-adjusted "
                 f"p = {p:.3g}{', and is below it' if standing == 'worse' else ''}): no winner is named.")
    abstaining = deployed_abstention(results)
    return [line + (f" {abstaining}" if abstaining else "")]


def deployed_abstention(results: dict) -> str | None:
    """What abstention gives the model to deploy, in words: 'Answering only the documents it is at least 0.795 sure
    of (the threshold that reached 95.0% accuracy on validation), it answers 72.4% of the test documents at 93.1%
    accuracy; the rest go to a person.' None without a model to deploy, or where its abstention answers nothing."""
    chosen = results.get("deployable")
    entry = report_rows(results).get(chosen["row"]) if chosen else None
    abstaining = (entry or {}).get("abstention") or {}
    test = abstaining.get("test")
    if not test or not test["answered"]:
        return None
    return (f"Answering only the documents it is at least {confidence(abstaining['threshold'])} sure of (the "
            f"threshold that reached {percent(abstaining['target'])} accuracy on validation), it answers "
            f"{percent(test['coverage'])} of the test documents at {percent(test['accuracy'])} accuracy; the rest go "
            "to a person.")


def _against(results: dict, best: str, subset: str) -> str:
    """'paired McNemar test vs x p = 0.012, vs y p = 0.4 (not significant)': best against every other strategy."""
    others = [n for n in results["strategy_order"] if n != best]
    return "paired McNemar test " + _said(adjusted_p_values(results, best, others, subset))


def _said(p_values: dict[str, float]) -> str:
    """'vs x p = 0.012, vs y p = 0.4 (not significant)'."""
    return ", ".join(f"vs {other} p = {p:.3g}{'' if p < ALPHA else ' (not significant)'}"
                     for other, p in p_values.items())


def _combined_sentences(results: dict) -> list[str]:
    """The ensemble and hybrid rows: what each combines, how that was chosen, and how it stands against every other
    row (each strategy, the baseline, the other combined row) in the paired test."""
    rows = combined_rows(results)
    lines = []
    for row in rows:
        others = (list(results["strategy_order"]) + ([results["baseline"]["name"]] if results.get("baseline") else [])
                  + [r["name"] for r in rows if r is not row])
        if "seeds" in row:
            spread = row["spread"]
            what = (f"{row['strategy']} at {len(row['seeds'])} seeds ({', '.join(str(k) for k in row['seeds'])}; "
                    f"single runs {mean_sd(spread['accuracy'])}, on documents over {results['data']['long_tokens']} "
                    f"tokens {mean_sd(spread['long_accuracy'])}), test probabilities averaged")
        elif row["name"] == "ensemble":
            what = (f"Ensemble of {' + '.join(row['members'])} (test probabilities averaged; the group chosen on "
                    f"{row['chosen_by']} among {row['groups_scored']}, no training)")
        else:
            what = (f"Hybrid of {row['members'][0]} and TF-IDF over its token ids (probabilities mixed at neural "
                    f"weight {row['mix']:.2f}, TF-IDF C = {row['C']}, both chosen on {row['chosen_by']}; "
                    f"{row['members'][0]} itself chosen on validation {row['base_chosen_by']})")
        lines.append(f"{what}: {percent(row['accuracy'])}{interval(row['accuracy_ci95'])}; paired McNemar test "
                     + _said(adjusted_p_values(results, row["name"], others, "all")) + ".")
    return lines


def _baseline_sentences(results: dict, decision: Verdict) -> list[str]:
    """Whether each strategy beats the TF-IDF baseline, on all documents, said plainly."""
    base = results.get("baseline")
    if not base:
        return []
    names = results["strategy_order"]
    labels = {n: n for n in names} | {r["name"]: combined_label(r) for r in combined_rows(results)}
    groups: dict[str, list[str]] = {"better": [], "same": [], "worse": []}
    adjusted = baseline_p_values(results)
    for n, label in labels.items():
        groups[decision.against_baseline[n]].append(
            f"{label} {100 * (accuracy_of(results, n) - base['accuracy']):+.1f} points, p = {adjusted[n]:.3g}")
    line = (f"Classical baseline (TF-IDF words+bigrams + logistic regression, C chosen on validation, trained in "
            f"{duration(base['train_seconds'])}): {percent(base['accuracy'])}{interval(base['accuracy_ci95'])}. ")
    parts = []
    if groups["better"]:
        parts.append("significantly better than it: " + "; ".join(groups["better"]))
    if groups["same"]:
        parts.append("not distinguishable from it: " + "; ".join(groups["same"]))
    if groups["worse"]:
        parts.append("significantly worse than it: " + "; ".join(groups["worse"]))
    line += ". ".join(p[0].upper() + p[1:] for p in parts) + "."
    if any(decision.against_baseline[n] != "better" for n in names):
        line += (" A strategy that does not beat this baseline has not earned its cost here: the baseline trains in "
                 "seconds and needs no GPU.")
    return [line]
