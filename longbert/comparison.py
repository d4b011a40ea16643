"""Compare strategies: train each named strategy on the same data, backbone, seed and budget, measure what each
one costs, and write one report that says which to use (reports/<name>/report.md, report.html, results.json).

    import longbert
    results = longbert.compare(["truncate", "chunk"], "recipes/compare_imdb.yaml", ["train.epochs=2"])
    results["strategies"]["chunk"]["accuracy"]

Each strategy's recipe is resolved as
    the base recipe (`recipe`, or recipes/compare_imdb.yaml)
    + strategy.name=<s>   (the base's strategy settings are kept when its strategy is <s>; others start from
                           their defaults)
    + the overrides, in order:
          key.path=value             every strategy (data, backbone, seed, train, eval, model)
          strategy.<field>=value     every strategy whose config has <field> (e.g. strategy.pooling=attention)
          <strategy>.<field>=value   that strategy only (e.g. truncate.max_tokens=254)
Per-strategy overrides reach only the strategy section, so data, seed, backbone and budget are the same for all.

Run folders are ordinary run folders (usable by `longbert predict` and `longbert evaluate`) under
<runs_dir>/<name>/<strategy>/. A repeated or interrupted compare picks up where it stopped:
    metrics.json and the same resolved recipe        -> reused, not trained again
    a checkpoint, no metrics.json, the same recipe   -> training continues from the checkpoint
    the same recipe but nothing to continue from     -> trained again from the start
    a different recipe                               -> an error before any training (choose another name, or
                                                        delete the folder to retrain)
Besides what `train` writes, each run folder gets speed-by-length.json: inference speed and peak memory per length
bucket, measured once on this machine and reused while the machine description is the same.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import math
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Iterable, Sequence

from longbert.errors import LongbertError

DEFAULT_RECIPE = "compare_imdb.yaml"
DEFAULT_RUNS_DIR = Path("runs") / "compare"
DEFAULT_REPORTS_DIR = Path("reports")
LONG_TOKENS = 512  # documents longer than this (WordPiece tokens with [CLS]/[SEP]) count as long
SPEED_FILE = "speed-by-length.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def _say(message: str) -> None:
    print(f"compare: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------------------
# The library entry point


def compare(
    strategies: Sequence[str] | str,
    recipe=None,
    overrides: Iterable[str] = (),
    name: str | None = None,
    *,
    runs_dir: str | Path = DEFAULT_RUNS_DIR,
    reports_dir: str | Path = DEFAULT_REPORTS_DIR,
    command: str | None = None,
    speed_documents: int = 48,
    examples: int = 6,
    long_tokens: int = LONG_TOKENS,
) -> dict:
    """Train (or reuse) one run per strategy and write the comparison report.

    strategies: names from the registry (a list, or one comma-separated string); all are checked before any
        training, unknown ones raise LongbertError listing the valid names.
    recipe: the base recipe: a YAML path, a Recipe, or None for recipes/compare_imdb.yaml.
    overrides: `key.path=value` strings (see the module docstring for the per-strategy forms).
    name: the report's name (reports/<name>/, <runs_dir>/<name>/); default: the base recipe's name.
    speed_documents: at most this many test documents per length bucket are timed for the speed plot.
    examples: at most this many long documents in the error analysis; long_tokens: what counts as long.
    Returns the results dict that results.json holds (every number in the report), with `report` giving the
    written files."""
    from longbert import report as report_module
    from longbert.hardware import describe_machine

    names = parse_strategies(strategies)
    overrides = list(overrides)
    base_raw, base_source, base_path = _base_recipe(recipe)
    name = name or str(base_raw.get("name") or "compare")
    if not _NAME.match(name):
        raise LongbertError(f"--name {name!r} must be a plain folder name (letters, digits, '.', '_', '-')")
    runs_dir, reports_dir = Path(runs_dir), Path(reports_dir)
    recipes = resolve_recipes(names, base_raw, base_source, overrides, name, runs_dir)
    plan = plan_runs(recipes)
    preflight(recipes, plan)
    if command is None:
        command = _equivalent_command(names, base_path, recipe, overrides, name, runs_dir, reports_dir)

    # Train what is not finished yet, one strategy after another.
    runs: dict[str, dict] = {}
    for number, strategy in enumerate(names, 1):
        runs[strategy] = _run_one(strategy, recipes[strategy], plan[strategy], command, f"[{number}/{len(names)}]")
        _release_memory()

    # Measure and analyse with the kept models, then assemble every number the report shows.
    predictions = {s: read_predictions(Path(recipes[s].output_dir)) for s in names}
    chosen = select_examples(predictions, long_tokens, examples)
    label_names = runs[names[0]]["metrics"]["label_names"]
    corpus = None
    speed: dict[str, dict] = {}
    decisive: dict[str, dict] = {}
    for strategy in names:
        run_dir = Path(recipes[strategy].output_dir)
        speed[strategy] = _cached_speed(run_dir, speed_documents, recipes[strategy].eval.batch_size)
        if speed[strategy] is not None and not chosen:
            continue
        if corpus is None:
            corpus = _load_test_corpus(recipes[names[0]], run_dir)
        model = _load_model(run_dir)
        if speed[strategy] is None:
            _say(f"timing {strategy} by document length")
            speed[strategy] = measure_speed_by_length(model, corpus.splits["test"], recipes[strategy].eval.batch_size,
                                                      speed_documents)
            _save_speed(run_dir, speed[strategy], speed_documents, recipes[strategy].eval.batch_size)
        decisive[strategy] = decisive_units(model, corpus.splits["test"],
                                            predictions[strategy], [c["index"] for c in chosen])
        del model
        _release_memory()
    error_examples = build_examples(chosen, predictions, decisive, corpus, label_names, recipes) if chosen else []

    results = assemble_results(
        name=name, names=names, recipes=recipes, runs=runs, predictions=predictions, speed=speed,
        examples=error_examples, command=command, base_source=base_source, overrides=overrides,
        machine=describe_machine(), long_tokens=long_tokens, label_names=label_names,
    )
    folder = reports_dir / name
    results["report"] = {"folder": str(folder), "markdown": str(folder / "report.md"),
                         "html": str(folder / "report.html"), "results": str(folder / "results.json")}
    report_module.write_report(results, folder)
    _say(f"report written to {folder}/")
    return results


def parse_strategies(value: Sequence[str] | str) -> list[str]:
    """'truncate,chunk' or ['truncate', 'chunk'] -> checked, de-duplicated names (order kept)."""
    from longbert.strategies.base import get_entry, strategy_names

    items = value.split(",") if isinstance(value, str) else [part for v in value for part in str(v).split(",")]
    names = list(dict.fromkeys(s.strip() for s in items if s.strip()))
    if not names:
        raise LongbertError(f"--strategies needs at least one name; valid strategies: {', '.join(strategy_names())}")
    unknown = [s for s in names if s not in strategy_names()]
    if len(unknown) == 1:
        get_entry(unknown[0])  # raises, listing the valid names
    if unknown:
        raise LongbertError(f"unknown strategies {', '.join(repr(s) for s in unknown)}; "
                            f"valid strategies: {', '.join(strategy_names())}")
    return names


# ------------------------------------------------------------------------------------------------------------
# Recipes: one per strategy, differing only in the strategy section (and the run's name and folder)


def default_recipe() -> Path:
    """recipes/compare_imdb.yaml of the longbert checkout (or of the working directory)."""
    for folder in (Path(__file__).resolve().parent.parent / "recipes", Path.cwd() / "recipes"):
        if (folder / DEFAULT_RECIPE).is_file():
            return folder / DEFAULT_RECIPE
    raise LongbertError(f"no --recipe given and the default base recipe recipes/{DEFAULT_RECIPE} was not found "
                        "(it ships with the longbert checkout); pass --recipe")


def _base_recipe(recipe) -> tuple[dict, str, Path | None]:
    """(raw recipe mapping, a name for error messages, the YAML path or None)."""
    from longbert.config import Recipe, read_recipe_file

    if isinstance(recipe, Recipe):
        return recipe.to_dict(), "the base recipe", None
    path = Path(recipe) if recipe is not None else default_recipe()
    if path.is_absolute() and path.is_relative_to(Path.cwd()):
        path = path.relative_to(Path.cwd())  # what the report shows: recipes/compare_imdb.yaml, not a home folder
    return read_recipe_file(path), str(path), path


def _strategy_fields(strategy: str) -> set[str]:
    from longbert.strategies.base import get_entry

    return {f.name for f in dataclasses.fields(get_entry(strategy).config_cls)} - {"name"}


def split_overrides(overrides: list[str], names: list[str]) -> dict[str, list[str]]:
    """Each strategy's own list of `key.path=value` overrides, in the order given (see the module docstring)."""
    from longbert.config import Recipe
    from longbert.strategies.base import strategy_names

    recipe_keys = {f.name for f in dataclasses.fields(Recipe)}
    per: dict[str, list[str]] = {s: [] for s in names}
    for text in overrides:
        if "=" not in text:
            raise LongbertError(f"override {text!r} must look like key.path=value")
        key, value = text.split("=", 1)
        keys = key.strip().split(".")
        if keys[0] in ("name", "output_dir"):
            raise LongbertError(f"override {text!r}: compare names the runs itself; use --name (and runs_dir)")
        if keys[0] == "strategy":
            if len(keys) == 1 or keys[1] == "name":
                raise LongbertError(f"override {text!r}: compare sets strategy.name itself; "
                                    "list strategies with --strategies")
            having = [s for s in names if keys[1] in _strategy_fields(s)]
            if not having:
                known = sorted(set().union(*(_strategy_fields(s) for s in names)))
                raise LongbertError(f"override {text!r}: none of {', '.join(names)} has a field {keys[1]!r}; "
                                    f"their fields: {', '.join(known)}")
            for s in having:
                per[s].append(text)
        elif keys[0] not in recipe_keys and keys[0] in strategy_names():
            if len(keys) == 1 or keys[1] == "name":
                raise LongbertError(f"override {text!r} must name a field: {keys[0]}.<field>=value")
            if keys[0] in per:  # settings for a strategy that is not being compared are ignored
                per[keys[0]].append(".".join(["strategy", *keys[1:]]) + "=" + value)
        else:
            for s in names:
                per[s].append(text)
    return per


def resolve_recipes(names: list[str], base_raw: dict, base_source: str, overrides: list[str], name: str,
                    runs_dir: Path) -> dict:
    """strategy -> its validated Recipe. Every problem of every strategy is raised together, before training."""
    from longbert.config import apply_overrides, recipe_from_dict

    per = split_overrides(overrides, names)
    recipes, problems = {}, {}
    for strategy in names:
        raw = copy.deepcopy(base_raw)
        section = raw.get("strategy")
        base_strategy = section.get("name") if isinstance(section, dict) else section
        if base_strategy != strategy:
            raw["strategy"] = {"name": strategy}
        try:
            raw = apply_overrides(raw, per[strategy])
            raw["name"] = f"{name}-{strategy}"
            raw["output_dir"] = str(runs_dir / name / strategy)
            recipes[strategy] = recipe_from_dict(raw, base_source)
        except LongbertError as error:
            problems.setdefault(str(error), []).append(strategy)
            continue
        if not recipes[strategy].data.test_split:
            problems.setdefault("compare reports on the test split; data.test_split must name one", []).append(strategy)
    _raise_problems(problems, names)
    return recipes


def _raise_problems(problems: dict[str, list[str]], names: list[str]) -> None:
    """One LongbertError for {message: strategies it concerns}; a message shared by every strategy is said once."""
    if problems:
        raise LongbertError(" | ".join(message if len(found) == len(names) else f"{', '.join(found)}: {message}"
                                       for message, found in problems.items()))


def preflight(recipes: dict, plan: dict[str, str]) -> None:
    """Build each model that is about to train (backbone loaded, strategy fitted to it) so that a setting the
    backbone cannot hold (a window longer than its positions) fails before the first strategy trains."""
    from longbert.model import LongDocumentClassifier

    problems: dict[str, list[str]] = {}
    for strategy, recipe in recipes.items():
        if plan[strategy] == "reuse":
            continue
        try:
            LongDocumentClassifier.from_recipe(recipe, ["a", "b"])
        except LongbertError as error:
            problems.setdefault(str(error), []).append(strategy)
    _release_memory()
    _raise_problems(problems, list(recipes))


def plan_runs(recipes: dict) -> dict[str, str]:
    """strategy -> 'reuse', 'resume' or 'train', from what its run folder holds. A folder holding a run with a
    different recipe is an error (raised for every such folder at once, before anything trains)."""
    from longbert.config import recipe_to_yaml

    plan, problems = {}, []
    for strategy, recipe in recipes.items():
        run_dir = Path(recipe.output_dir)
        saved = run_dir / "recipe.yaml"
        if not run_dir.exists() or not any(run_dir.iterdir()):
            plan[strategy] = "train"
        elif not saved.is_file():
            problems.append(f"{run_dir} is not empty and holds no recipe.yaml; move it away or choose another --name")
        elif saved.read_text() != recipe_to_yaml(recipe):
            differing = _differences(saved, recipe)
            problems.append(f"{run_dir} holds a run with a different recipe ({differing}); choose another --name, "
                            "or delete that folder to train it again")
        elif (run_dir / "metrics.json").is_file():
            plan[strategy] = "reuse"
        elif (run_dir / "checkpoint" / "state.json").is_file():
            plan[strategy] = "resume"
        else:
            plan[strategy] = "restart"
    if problems:
        raise LongbertError(" | ".join(problems))
    return plan


def _differences(saved: Path, recipe) -> str:
    import yaml

    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    old, new = flat(yaml.safe_load(saved.read_text()) or {}), flat(recipe.to_dict())
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:4])
    return shown + (f" and {len(keys) - 4} more" if len(keys) > 4 else "") if keys else "formatting differs"


def _equivalent_command(names, base_path, recipe, overrides, name, runs_dir, reports_dir) -> str:
    """The `longbert compare` command that repeats a library call."""
    parts = ["longbert", "compare", "--strategies", ",".join(names)]
    if base_path is not None and recipe is not None:
        parts += ["--recipe", str(base_path)]
    for text in overrides:
        parts += ["--set", text]
    parts += ["--name", name]
    if runs_dir != DEFAULT_RUNS_DIR:
        parts += ["--runs-dir", str(runs_dir)]
    if reports_dir != DEFAULT_REPORTS_DIR:
        parts += ["--reports-dir", str(reports_dir)]
    command = shlex.join(parts)
    if base_path is None and recipe is not None:
        command += "  # called from Python with a Recipe object as the base"
    return command


# ------------------------------------------------------------------------------------------------------------
# Training


def _run_one(strategy: str, recipe, action: str, command: str, counter: str) -> dict:
    from longbert.training import TrainingInterrupted, train

    run_dir = Path(recipe.output_dir)
    if action == "reuse":
        _say(f"{counter} {strategy}: finished run in {run_dir} has the same recipe; reused")
        return {"status": "reused", "metrics": json.loads((run_dir / "metrics.json").read_text())}
    if action == "restart":
        _say(f"{counter} {strategy}: {run_dir} stopped before its first checkpoint; training it again")
        shutil.rmtree(run_dir)
    verb = "continuing from the checkpoint in" if action == "resume" else "training into"
    _say(f"{counter} {strategy}: {verb} {run_dir}")
    try:
        result = train(recipe, resume=action == "resume", command=command)
    except TrainingInterrupted as error:
        raise TrainingInterrupted(f"compare stopped while training {strategy} ({error}); run the same compare "
                                  "command again to continue where it stopped") from None
    return {"status": "resumed" if action == "resume" else "trained", "metrics": result.metrics}


def _release_memory() -> None:
    """Let one strategy's model and optimiser go before the next is built (peak memory is measured per run)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def read_predictions(run_dir: Path) -> list[dict]:
    path = run_dir / "predictions-test.jsonl"
    if not path.is_file():
        raise LongbertError(f"{run_dir} has no predictions-test.jsonl; compare needs a test split (data.test_split)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _load_model(run_dir: Path):
    import torch

    from longbert.model import LongDocumentClassifier

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return LongDocumentClassifier.from_pretrained(run_dir).to(device).eval()


def _load_test_corpus(recipe, run_dir: Path):
    """The test documents exactly as training saw them (same data settings, seed and tokenizer)."""
    from transformers import AutoTokenizer

    from longbert.backbone import prepare_tokenizer
    from longbert.data import load_corpus

    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(run_dir / "best"))
    corpus = load_corpus(recipe.data, tokenizer, recipe.seed, recipe.model.problem_type == "multi_label")
    corpus.tokenizer = tokenizer
    return corpus


# ------------------------------------------------------------------------------------------------------------
# Speed and memory against document length


def measure_speed_by_length(model, test, batch_size: int, per_bucket: int) -> dict:
    """Time inference on up to `per_bucket` test documents of each length bucket.
    Returns {bucket: {documents, mean_tokens, documents_per_second, tokens_per_second, peak_memory_mb, memory_kind}}."""
    from longbert.data import LENGTH_BUCKETS, length_bucket
    from longbert.evaluation import predict_dataset

    lengths = list(test["n_tokens"])
    # One small batch first, so the first bucket does not pay for lazy initialisation.
    predict_dataset(model, test.select(range(min(2, len(test)))), batch_size, description="warming up")
    out = {}
    for _, _, bucket in LENGTH_BUCKETS:
        rows = [i for i, n in enumerate(lengths) if length_bucket(n) == bucket][:per_bucket]
        if not rows:
            out[bucket] = {"documents": 0, "mean_tokens": None, "documents_per_second": None,
                           "tokens_per_second": None, "peak_memory_mb": None, "memory_kind": None}
            continue
        speed = predict_dataset(model, test.select(rows), batch_size, description=f"timing {bucket}")["speed"]
        out[bucket] = {
            "documents": len(rows),
            "mean_tokens": round(sum(lengths[i] for i in rows) / len(rows), 1),
            "documents_per_second": speed["documents_per_second"],
            "tokens_per_second": speed["tokens_per_second"],
            "peak_memory_mb": speed["peak_memory_mb"],
            "memory_kind": speed["memory_kind"],
        }
    return out


def _speed_key(per_bucket: int, batch_size: int) -> dict:
    from longbert.hardware import describe_machine

    return {"machine": describe_machine(), "documents_per_bucket": per_bucket, "batch_size": batch_size}


def _cached_speed(run_dir: Path, per_bucket: int, batch_size: int) -> dict | None:
    path = run_dir / SPEED_FILE
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    if saved.get("key") != _speed_key(per_bucket, batch_size):
        return None  # measured elsewhere or differently: measure again
    return saved["buckets"]


def _save_speed(run_dir: Path, buckets: dict, per_bucket: int, batch_size: int) -> None:
    from longbert.evaluation import write_json

    write_json(run_dir / SPEED_FILE, {"key": _speed_key(per_bucket, batch_size), "buckets": buckets})


# ------------------------------------------------------------------------------------------------------------
# Error analysis: long documents that one strategy gets right and another gets wrong


def _right(row: dict) -> bool:
    return row["predicted"] == row["label"]


def select_examples(predictions: dict[str, list[dict]], long_tokens: int = LONG_TOKENS, limit: int = 6) -> list[dict]:
    """Pick up to `limit` long test documents on which the strategies disagree.

    For every ordered pair (A right, B wrong) the candidates are B's most confident mistakes; pairs take turns so
    each pair gets examples before any gets many. Returns [{index, right: A, wrong: B}] in the order chosen."""
    names = list(predictions)
    if len(names) < 2 or limit < 1:
        return []
    rows = [predictions[s] for s in names]
    n = len(rows[0])
    same_documents = all(len(r) == n and all(r[i]["n_tokens"] == rows[0][i]["n_tokens"] for i in range(n))
                         for r in rows)
    if not same_documents:
        return []  # the runs did not see the same test documents: nothing to compare document by document
    queues = {}
    for a in names:
        for b in names:
            if a == b:
                continue
            pa, pb = predictions[a], predictions[b]
            found = [i for i in range(n) if pa[i]["n_tokens"] > long_tokens and _right(pa[i]) and not _right(pb[i])]
            found.sort(key=lambda i: (-max(pb[i]["probabilities"]), i))  # the most confident mistakes first
            queues[(a, b)] = found
    chosen, seen = [], set()
    while len(chosen) < limit and any(queues.values()):
        for (a, b), queue in queues.items():
            while queue and queue[0] in seen:
                queue.pop(0)
            if queue and len(chosen) < limit:
                i = queue.pop(0)
                seen.add(i)
                chosen.append({"index": i, "right": a, "wrong": b})
    return chosen


def decisive_units(model, test, predictions: list[dict], indices: list[int]) -> dict[int, dict]:
    """For each chosen document: which unit (chunk or window) decided most, and how that was measured.

    With informative pooling weights (attention, max) it is the unit that weighed most. With equal weights (mean
    pooling) it is the unit whose removal lowers the probability of the predicted class most (occlusion: the
    backbone runs once, the pooler and head once per unit). A strategy with one unit reports the tokens it kept.
    Unit token ranges come from the strategy's `unit_spans` hook (see strategies/base.py)."""
    from longbert.strategies.base import unit_spans

    out = {}
    for i in indices:
        ids = test[i]["input_ids"]
        units = unit_spans(model.strategy, len(ids))
        row = predictions[i]
        if units is None:
            out[i] = {"method": None, "note": "this strategy does not say which tokens its units cover (unit_spans)"}
            continue
        if len(units) == 1:
            out[i] = {"method": "kept", "unit": 0, "units": 1, "spans": [list(r) for r in units[0]]}
            continue
        weights = row.get("unit_weights")
        if weights is not None and len(weights) == len(units) and max(weights) - min(weights) > 1e-3:
            unit = max(range(len(weights)), key=weights.__getitem__)
            out[i] = {"method": "weight", "unit": unit, "units": len(units), "value": float(weights[unit]),
                      "spans": [list(r) for r in units[unit]]}
            continue
        if isinstance(row["predicted"], list):
            out[i] = {"method": None, "note": "equal unit weights; occlusion is not done for multi-label runs"}
            continue
        drops = _occlusion(model, ids, row["predicted"])
        if drops is None or len(drops) != len(units):
            out[i] = {"method": None, "note": "the model's units do not match the recomputed chunks"}
            continue
        unit = max(range(len(drops)), key=drops.__getitem__)
        out[i] = {"method": "occlusion", "unit": unit, "units": len(units), "value": float(drops[unit]),
                  "spans": [list(r) for r in units[unit]]}
    return out


def _occlusion(model, ids: list[int], predicted: int) -> list[float] | None:
    """How much the probability of `predicted` drops when each unit is left out of the pooling: (N,) floats."""
    import torch

    from longbert.hardware import autocast_for
    from longbert.strategies.base import Units

    device = next(model.parameters()).device
    with torch.no_grad(), autocast_for(model):
        units = model.encode([torch.tensor(ids, dtype=torch.long, device=device)])  # (1, N, H)
        n = units.vectors.shape[1]
        if n < 2:
            return None
        full = model.probabilities(model(units=units).logits)[0, predicted]
        vectors = units.vectors.expand(n, -1, -1).contiguous()  # (N, N, H): row i is the document ...
        mask = units.mask.expand(n, -1) & ~torch.eye(n, dtype=torch.bool, device=device)  # ... without unit i
        without = model.probabilities(model(units=Units(vectors, mask)).logits)[:, predicted]  # (N,)
    return (full - without).float().cpu().tolist()


def excerpt(text: str, offsets: list[tuple[int, int]], span: tuple[int, int], context: int = 24,
            head: int = 60, tail: int = 20) -> list[dict]:
    """The text around token span [start, end) as segments [{text, highlight}], shortened: `context` tokens
    either side, and a long span shown as its first `head` and last `tail` tokens."""
    start, end = span
    total = len(offsets)
    end = min(end, total)
    if start >= end:
        return []
    # HTML line breaks (IMDb has many) become spaces of the same length, so the token offsets still hold.
    text = _BREAK.sub(lambda m: " " * len(m.group()), text)

    def chars(a: int, b: int) -> str:  # text of tokens [a, b)
        return text[offsets[a][0] : offsets[b - 1][1]] if a < b else ""

    before_from = max(0, start - context)
    after_to = min(total, end + context)
    segments = []
    prefix = "… " if before_from > 0 else ""
    # Gaps between tokens (spaces) belong to the text before the next token.
    segments.append({"text": prefix + text[offsets[before_from][0] : offsets[start][0]], "highlight": False})
    if end - start > head + tail:
        segments.append({"text": chars(start, start + head), "highlight": True})
        segments.append({"text": f" … [{end - start - head - tail} tokens] … ", "highlight": False})
        segments.append({"text": chars(end - tail, end), "highlight": True})
    else:
        segments.append({"text": chars(start, end), "highlight": True})
    after = text[offsets[end - 1][1] : offsets[after_to - 1][1]] if end < after_to else ""
    segments.append({"text": after + (" …" if after_to < total else ""), "highlight": False})
    for previous, segment in zip([None, *segments], segments):
        segment["text"] = _SPACES.sub(" ", segment["text"])
        if previous and previous["text"].endswith(" ") and segment["text"].startswith(" "):
            segment["text"] = segment["text"][1:]
    return [s for s in segments if s["text"]]


def _offsets(tokenizer, text: str, ids: list[int]) -> list[tuple[int, int]] | None:
    """Character offsets of each content token, when the tokenizer gives them and they match the stored ids."""
    if not getattr(tokenizer, "is_fast", False):
        return None
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if encoded["input_ids"][: len(ids)] != list(ids):
        return None
    return [tuple(o) for o in encoded["offset_mapping"][: len(ids)]]


def _label_text(value, label_names: list[str]) -> str:
    if isinstance(value, list):
        return ", ".join(n for n, v in zip(label_names, value) if v) or "(none)"
    return label_names[value]


def build_examples(chosen, predictions, decisive, corpus, label_names, recipes) -> list[dict]:
    """The error-analysis entries of results.json: per document, every strategy's prediction and decisive part,
    with text excerpts (highlighted segments) for strategies that chose among several units."""
    test = corpus.splits["test"]
    out = []
    for choice in chosen:
        i = choice["index"]
        row0 = predictions[choice["right"]][i]
        text, ids = test[i]["text"], test[i]["input_ids"]
        offsets = _offsets(corpus.tokenizer, text, ids)
        per = {}
        for strategy, rows in predictions.items():
            row = rows[i]
            entry = {
                "predicted": _label_text(row["predicted"], label_names),
                "correct": _right(row),
                "probability_of_truth": None if isinstance(row["label"], list) else row["probabilities"][row["label"]],
                "decisive": decisive.get(strategy, {}).get(i),
                "excerpt": None,
            }
            d = entry["decisive"]
            if d and d.get("method") in ("weight", "occlusion"):
                start, end = d["spans"][0]
                if offsets is not None:
                    entry["excerpt"] = excerpt(text, offsets, (start, end))
                else:  # a slow tokenizer: decode the tokens instead of cutting the original text
                    entry["excerpt"] = [{"text": corpus.tokenizer.decode(ids[start:end]), "highlight": True}]
            per[strategy] = entry
        out.append({
            "index": i,
            "n_tokens": row0["n_tokens"],
            "read_tokens": len(ids),  # content tokens after data.max_document_tokens
            "label": _label_text(row0["label"], label_names),
            "right": [s for s in predictions if _right(predictions[s][i])],
            "wrong": [s for s in predictions if not _right(predictions[s][i])],
            "chosen_as": {"right": choice["right"], "wrong": choice["wrong"]},
            "strategies": per,
        })
    return out


# ------------------------------------------------------------------------------------------------------------
# Statistics


def wilson_interval(correct: int, total: int, z: float = 1.96) -> list[float] | None:
    """95% Wilson score interval of a proportion."""
    if total == 0:
        return None
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar test on the documents where exactly one of two classifiers is right."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, j) for j in range(k + 1))
    return min(1.0, 2 * tail / 2**n)


def paired_comparisons(predictions: dict[str, list[dict]], long_tokens: int) -> list[dict]:
    """Every pair of strategies, on all test documents and on the long ones: who alone was right how often."""
    names = list(predictions)
    out = []
    for x, a in enumerate(names):
        for b in names[x + 1 :]:
            for subset in ("all", "long"):
                only_a = only_b = 0
                for ra, rb in zip(predictions[a], predictions[b]):
                    if subset == "long" and ra["n_tokens"] <= long_tokens:
                        continue
                    only_a += _right(ra) and not _right(rb)
                    only_b += _right(rb) and not _right(ra)
                out.append({"a": a, "b": b, "documents": subset, "only_a_right": only_a, "only_b_right": only_b,
                            "p_value": mcnemar_p(only_a, only_b)})
    return out


# ------------------------------------------------------------------------------------------------------------
# Results: every number the report shows


def assemble_results(*, name, names, recipes, runs, predictions, speed, examples, command, base_source, overrides,
                     machine, long_tokens, label_names) -> dict:
    from longbert import __version__

    strategies = {}
    for s in names:
        metrics = runs[s]["metrics"]
        test = metrics["test"]
        rows = predictions[s]
        right = sum(_right(r) for r in rows)
        long_rows = [r for r in rows if r["n_tokens"] > long_tokens]
        long_right = sum(_right(r) for r in long_rows)
        strategies[s] = {
            "status": runs[s]["status"],
            "run_dir": recipes[s].output_dir,
            "settings": dataclasses.asdict(recipes[s].strategy),
            "accuracy": test["accuracy"],
            "accuracy_ci95": wilson_interval(right, len(rows)),
            "macro_f1": test["macro_f1"],
            "documents": test["documents"],
            "by_length": test["by_length"],
            "long": {"documents": len(long_rows), "accuracy": long_right / len(long_rows) if long_rows else None,
                     "ci95": wilson_interval(long_right, len(long_rows))},
            "confusion_matrix": test["confusion_matrix"],
            "per_class": test.get("per_class"),
            "train_seconds": metrics["train_seconds"],
            "steps": metrics["steps"],
            "trainable_parameters": metrics["trainable_parameters"],
            "speed": test["speed"],
            "speed_by_length": speed[s],
            "eval_batch_size": recipes[s].eval.batch_size,
            "mixed_precision": metrics.get("mixed_precision"),
            "machine": metrics["machine"],
        }
    fastest = max((strategies[s]["speed"]["documents_per_second"] or 0) for s in names) or None
    quickest_train = min(strategies[s]["train_seconds"] or math.inf for s in names)
    for s in names:
        dps = strategies[s]["speed"]["documents_per_second"]
        strategies[s]["relative_cost"] = {
            "inference": fastest / dps if fastest and dps else None,
            "training": (strategies[s]["train_seconds"] / quickest_train
                         if quickest_train not in (0, math.inf) else None),
        }

    first = recipes[names[0]]
    first_metrics = runs[names[0]]["metrics"]
    notes = []
    steps = {s: strategies[s]["steps"] for s in names}
    if len(set(steps.values())) > 1:
        notes.append(f"the strategies took different numbers of optimisation steps: {steps}")
    machines = {json.dumps(strategies[s]["machine"], sort_keys=True) for s in names}
    if len(machines) > 1:
        notes.append("the runs were trained on different machines: training times are not comparable")
    test_rows = predictions[names[0]]
    return {
        "name": name,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "longbert_version": __version__,
        "command": command,
        "base_recipe": base_source,
        "overrides": overrides,
        "machine": machine,
        "strategy_order": names,
        "label_names": label_names,
        "problem_type": first.model.problem_type,
        "budget": {
            "seed": first.seed,
            "backbone": first.backbone.name,
            "finetune": first.model.finetune,
            "epochs": first.train.epochs,
            "max_steps": first.train.max_steps,
            "batch_size": first.train.batch_size,
            "gradient_accumulation": first.train.gradient_accumulation,
            "learning_rate": first.train.learning_rate,
            "steps": steps,
        },
        "data": {
            "path": first.data.path,
            "splits": first_metrics.get("data"),
            "test_documents": len(test_rows),
            "long_tokens": long_tokens,
            "long_documents": sum(r["n_tokens"] > long_tokens for r in test_rows),
        },
        "strategies": strategies,
        "comparisons": paired_comparisons(predictions, long_tokens),
        "error_analysis": {"long_tokens": long_tokens, "examples": examples,
                           "spans": "[start, end) indices of content tokens (0-based, [CLS]/[SEP] not counted)"},
        "notes": notes,
    }
