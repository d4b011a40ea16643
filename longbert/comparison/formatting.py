"""How a comparison's numbers read, the same in the verdict, the report's pages and the terminal summary: shares as
percentages with their 95% interval, durations, memory, the length buckets' titles, and a decisive part of a
document in words; and compare's progress lines (`say`)."""

from __future__ import annotations

from longbert.data.lengths import BUCKET_NAMES
from longbert.utils.logs import get_logger


def say(message: str) -> None:
    """A progress line of compare's on stderr (stdout stays for the summary)."""
    get_logger(__name__).info(f"compare: {message}")




def shown_buckets(results: dict) -> tuple[str, ...]:
    """The length buckets that hold test documents, in order: a test of long documents only (compare_imdb's) has no
    '≤512' column of n/a."""
    first = results["strategies"][results["strategy_order"][0]]
    return tuple(b for b in BUCKET_NAMES if first["by_length"].get(b, {}).get("documents"))


COMBINED = ("ensemble", "hybrid")  # rows made from trained strategies without training: their keys in results


def combined_rows(results: dict) -> list[dict]:
    """The report's rows that combine trained runs (the ensemble, the hybrid, each strategy's seeds averaged), those
    the comparison has."""
    return [results[key] for key in COMBINED if results.get(key)] + list(results.get("seed_ensembles") or [])


def combined_label(row: dict) -> str:
    """A combined row's name in tables: 'ensemble (chunk + sliding)', 'hybrid (chunk + tfidf)', 'chunk × 5 seeds
    (averaged)'."""
    if "seeds" in row:
        return f"{row['name']} (averaged)"
    return f"{row['name']} ({' + '.join(row['members'])})"


def report_rows(results: dict) -> dict[str, dict]:
    """Every row of a report by name, in its order: the strategies, the combined rows, the baseline."""
    rows = dict(results["strategies"])
    rows |= {r["name"]: r for r in combined_rows(results)}
    return rows | ({results["baseline"]["name"]: results["baseline"]} if results.get("baseline") else {})


def labelled_rows(results: dict) -> dict[str, dict]:
    """Every row of a report by its label in tables: the strategies, 'ensemble (chunk + sliding)', ..., 'tfidf
    (baseline)'."""
    rows = {n: results["strategies"][n] for n in results["strategy_order"]}
    rows |= {combined_label(c): c for c in combined_rows(results)}
    base = results.get("baseline")
    return rows | ({f"{base['name']} (baseline)": base} if base else {})


def mean_sd(spread: dict | None, share: bool = True) -> str:
    """A spread over seeds as '85.2 ± 1.3%' (a share) or '0.852 ± 0.013'; 'n/a' when there is none."""
    if not spread:
        return "n/a"
    return (f"{100 * spread['mean']:.1f} ± {100 * spread['sd']:.1f}%" if share else
            f"{spread['mean']:.3f} ± {spread['sd']:.3f}")


def percent(value) -> str:
    """0.912 -> '91.2%'; None -> 'n/a'."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def confidence(value: float) -> str:
    """A confidence threshold: 0.795 -> '0.795'; one that rounds to 1 keeps its digits (0.99987 -> '0.99987')."""
    return f"{value:.3f}" if value < 0.9995 else f"{value:.6f}".rstrip("0")


def number(value, digits: int = 1) -> str:
    """1234.5 -> '1,234.5'; None -> 'n/a'."""
    return "n/a" if value is None else f"{value:,.{digits}f}"


def duration(seconds) -> str:
    """Seconds as '42.0 s', or from two minutes on as '3.5 min'; None -> 'n/a'."""
    if seconds is None:
        return "n/a"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def interval(bounds) -> str:
    """A 95% interval [low, high] as ' (88.1–93.0)' to follow a percentage; nothing when there is none."""
    return "" if not bounds else f" ({100 * bounds[0]:.1f}–{100 * bounds[1]:.1f})"


def memory(speed: dict) -> str:
    """'1,572 MB (+96)': the peak, and in brackets what the measured pass added (absent in older results)."""
    added = speed.get("added_memory_mb")
    return f"{number(speed['peak_memory_mb'], 0)} MB" + ("" if added is None else f" (+{number(added, 0)})")
