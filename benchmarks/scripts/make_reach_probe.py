"""Build a reach probe: a labelled task made of real text in which, by construction, the evidence that decides the
label lies at a known depth of a long document, or is spread over all of it, so that `longbert compare` on it
(recipes/compare/reach.yaml) shows where reading the whole document pays.

    python benchmarks/scripts/make_reach_probe.py [--task depth] [--output runs/data/reach_depth] [--train 2000]
        [--validation 500] [--test 2000] [--length 1500] [--seed 0] [--data-dir ../shared/data]
    python benchmarks/scripts/make_reach_probe.py --task majority       # writes runs/data/reach_majority

Each document is --length whitespace words (1,500 by default: about 2,000 WordPiece tokens) of neutral filler, news
articles from Hyperpartisan concatenated whole and cut at word boundaries, with IMDb reviews spliced in:

  depth     one review at one of the --depths word offsets (0,250,600,1000,end; `end` puts it last, ending the
            document); label = the review's sentiment. Every depth has the same number of documents of each label.
            ids: depth-<offset>-<n>, e.g. depth-0600-000123, depth-end-000007.
  majority  three reviews: the first at the start, the second in the middle, the third ending the document; label =
            the majority sentiment. The (first, middle, last) patterns cycle so that the first review disagrees
            with the label in half of the documents, the last in a quarter and the middle in a quarter: the first
            alone is chance, and no other review, nor any two of them (head+tail truncation sees the first and the
            last), decide more than 3/4 of the labels; only reading all three does.
            ids: majority-<pattern>-<n>, e.g. majority-pnn-000123 (p = pos, n = neg; first, middle, last).

Reviews are those of --min-review-words to --max-review-words whitespace words (30 to 200 by default: 200 words are
about 260 WordPiece tokens, and fewer than 30 seldom say enough to decide a label), with IMDb's `<br />` breaks
turned into spaces and runs of whitespace into one; each is used once. Train and validation reviews come from IMDb's
train split (disjoint), test reviews from its test split less the texts that also occur in train; filler articles
for train and validation come from disjoint parts (80% and 20%, seeded) of Hyperpartisan's semeval_train_all, for
test from semeval_test less the texts that also occur in semeval_train_all. Word offsets count whitespace words of
the written text: text.split()[start:start + words] is the review.

Writes OUTPUT/train.jsonl, validation.jsonl (unless --validation 0: then `longbert train` carves validation from
train) and test.jsonl, one document a line: id, text, label (0 = neg, 1 = pos) and where the reviews are (depth:
review_start, review_words, source_id; majority: review_starts, review_words, review_labels, source_ids; both:
filler_ids, the Hyperpartisan articles used), and OUTPUT/metadata.json (label_names, the settings, the documents per
group and label), from which longbert reads the class names.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LABEL_NAMES = ("neg", "pos")
LETTERS = "np"  # pattern letters by label: n = neg (0), p = pos (1)
# (first, middle, last) sentiments, alternating the majority label (pos, neg, ...): the first review disagrees with
# the majority in 4 of 8, the last in 2 of 8 (ppn, nnp), the middle in 2 of 8 (pnp, npn).
MAJORITY_CYCLE = ("npp", "pnn", "ppn", "nnp", "npp", "pnn", "pnp", "npn")
BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
# The share of semeval_train_all's articles kept for validation's filler, so that validation, like test, reads filler
# that training never saw (a model can learn spurious labels of filler it saw; model selection should not reward it).
VALIDATION_FILLER = 0.2


class ProbeError(Exception):
    """Bad input: one line for the user, no traceback."""


def default_data_dir() -> Path:
    """The first folder of LONGBERT_DATA_DIR (colon-separated) holding imdb/, else ../shared/data beside the repo."""
    roots = [Path(p) for p in os.environ.get("LONGBERT_DATA_DIR", "").split(os.pathsep) if p]
    fallback = roots[0] if roots else REPO_ROOT.parent / "shared" / "data"
    return next((r for r in roots if (r / "imdb").is_dir()), fallback)


def read_rows(file: Path) -> list[dict]:
    if not file.is_file():
        raise ProbeError(f"{file} not found; point --data-dir (or LONGBERT_DATA_DIR) at a folder holding imdb/ and "
                         "hyperpartisan/")
    rows = []
    try:
        with gzip.open(file, "rt", encoding="utf-8") as stream:
            for number, line in enumerate(stream, 1):
                if line.strip():
                    row = json.loads(line)
                    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                        raise ProbeError(f"{file}:{number} is not a JSON object with a text field")
                    rows.append(row)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as error:
        detail = (str(error).splitlines() or [type(error).__name__])[0]
        raise ProbeError(f"{file} cannot be read: {detail}") from None
    return rows


def review_words(text: str) -> list[str]:
    return BREAK.sub(" ", text).split()


def review_pools(data_dir: Path, min_words: int, max_words: int) -> dict[str, dict[int, list[tuple[str, list[str]]]]]:
    """{IMDb split: {label: [(IMDb id, words), ...]}}: distinct reviews of `min_words` to `max_words` words, in file
    order; the test split without the texts that also occur in train."""
    seen: set[str] = set()  # the texts of train, then of test too
    pools = {}
    for split in ("train", "test"):
        pools[split] = {0: [], 1: []}
        for row in read_rows(data_dir / "imdb" / f"{split}.jsonl.gz"):
            words = review_words(row["text"])
            key = " ".join(words)
            if key in seen:
                continue
            seen.add(key)
            if min_words <= len(words) <= max_words and row.get("label") in (0, 1):
                pools[split][row["label"]].append((str(row.get("id", "")), words))
    return pools


def filler_pools(data_dir: Path, seed: int) -> dict[str, list[tuple[object, list[str]]]]:
    """{split: [(article id, words), ...]}: distinct articles; train and validation share out semeval_train_all
    (a seeded VALIDATION_FILLER of it for validation), test has semeval_test less the texts in semeval_train_all."""
    pools, seen = {}, set()
    for part, file in (("train", "semeval_train_all"), ("test", "semeval_test")):
        pools[part] = []
        for row in read_rows(data_dir / "hyperpartisan" / f"{file}.jsonl.gz"):
            words = row["text"].split()
            key = " ".join(words)
            if words and key not in seen:
                seen.add(key)
                pools[part].append((row.get("id"), words))
    shuffled = list(pools["train"])
    random.Random(f"{seed}:filler").shuffle(shuffled)
    cut = round(len(shuffled) * VALIDATION_FILLER)
    pools["validation"], pools["train"] = shuffled[:cut], shuffled[cut:]
    for split, articles in pools.items():
        if not articles:
            raise ProbeError(f"{data_dir / 'hyperpartisan'} leaves no filler articles for {split}")
    return pools


def filler(rng: random.Random, articles: list, count: int) -> tuple[list[str], list]:
    """`count` words of whole articles drawn at random (none twice in one document while others are left),
    concatenated and cut at the end; and the ids of the articles used."""
    words: list[str] = []
    used: list = []
    taken: set[int] = set()
    while len(words) < count:
        k = rng.randrange(len(articles))
        if k in taken and len(taken) < len(articles):
            continue
        taken.add(k)
        used.append(articles[k][0])
        words.extend(articles[k][1])
    return words[:count], used


def assemble(rng: random.Random, articles: list, length: int, placed: list[tuple[int, list[str]]]):
    """A document of `length` words: the reviews of `placed` ((start, words), in order, not overlapping) at their
    starts, filler everywhere else. Returns (text, filler article ids)."""
    gaps, position = [], 0
    for start, words in placed:
        gaps.append(start - position)
        position = start + len(words)
    gaps.append(length - position)
    fill, used = filler(rng, articles, sum(gaps))
    out, at = [], 0
    for gap, (_, words) in zip(gaps, placed + [(length, [])]):
        out += fill[at : at + gap]
        at += gap
        out += words
    return " ".join(out), used


def depth_tag(depth, length: int) -> str:
    return "end" if depth == "end" else f"{depth:0{max(4, len(str(length)))}d}"


def depth_documents(rng, reviews, articles, count, depths, length) -> list[dict]:
    """`count` depth documents: each (depth, label) pair count / (2 * len(depths)) times, in random order."""
    slots = [(depths[(i // 2) % len(depths)], i % 2) for i in range(count)]
    rng.shuffle(slots)
    rows = []
    for n, (depth, label) in enumerate(slots):
        source_id, words = reviews[label].pop()
        start = length - len(words) if depth == "end" else depth
        text, used = assemble(rng, articles, length, [(start, words)])
        rows.append({"id": f"depth-{depth_tag(depth, length)}-{n:06d}", "text": text, "label": label,
                     "review_start": start, "review_words": len(words), "source_id": source_id,
                     "filler_ids": used})
    return rows


def majority_documents(rng, reviews, articles, count, length) -> list[dict]:
    """`count` majority documents, their (first, middle, last) patterns cycling through MAJORITY_CYCLE."""
    slots = [MAJORITY_CYCLE[i % len(MAJORITY_CYCLE)] for i in range(count)]
    rng.shuffle(slots)
    rows = []
    for n, pattern in enumerate(slots):
        labels = [LETTERS.index(c) for c in pattern]
        drawn = [reviews[label].pop() for label in labels]
        first, middle, last = (words for _, words in drawn)
        starts = [0, (length - len(middle)) // 2, length - len(last)]
        text, used = assemble(rng, articles, length, list(zip(starts, (first, middle, last))))
        rows.append({"id": f"majority-{pattern}-{n:06d}", "text": text, "label": int(sum(labels) >= 2),
                     "review_starts": starts, "review_words": [len(first), len(middle), len(last)],
                     "review_labels": labels, "source_ids": [source for source, _ in drawn], "filler_ids": used})
    return rows


def reviews_needed(task: str, count: int) -> dict[int, int]:
    if task == "depth":
        return {0: count // 2, 1: count // 2}
    letters = "".join(MAJORITY_CYCLE[i % len(MAJORITY_CYCLE)] for i in range(count))
    return {label: letters.count(LETTERS[label]) for label in (0, 1)}


def draw_reviews(pools, sizes: dict[str, int], task: str, seed: int, words: str) -> dict[str, dict[int, list]]:
    """The reviews each split uses, by label: test's from IMDb test; train's, then validation's, from IMDb train
    (seeded shuffles of each pool, so validation never shares a review with train)."""
    out = {}
    for imdb_split, splits in (("train", ("train", "validation")), ("test", ("test",))):
        order = {}
        for label in (0, 1):
            order[label] = list(pools[imdb_split][label])
            random.Random(f"{seed}:{imdb_split}:{label}").shuffle(order[label])
        taken = {0: 0, 1: 0}
        for split in splits:
            need = reviews_needed(task, sizes[split])
            out[split] = {}
            for label in (0, 1):
                if taken[label] + need[label] > len(order[label]):
                    wanted = sum(reviews_needed(task, sizes[s])[label] for s in splits)
                    raise ProbeError(
                        f"IMDb {imdb_split} has {len(order[label])} distinct {LABEL_NAMES[label]} reviews of "
                        f"{words} words; {' and '.join(splits)} need {wanted}: lower the sizes or widen "
                        "--min-review-words/--max-review-words")
                # popped from the end by the document builders: reverse so that they use the pool in shuffled order
                out[split][label] = order[label][taken[label] : taken[label] + need[label]][::-1]
                taken[label] += need[label]
    return out


def parse_depths(text: str, length: int, max_words: int) -> list:
    depths = []
    for part in text.split(","):
        part = part.strip()
        if part == "end":
            depths.append("end")
            continue
        if not part.isdigit():
            raise ProbeError(f"--depths {text!r}: {part!r} is neither a word offset (an integer >= 0) nor 'end'")
        depth = int(part)
        if depth + max_words > length:
            raise ProbeError(f"--depths {text!r}: offset {depth} leaves no room for a review of up to {max_words} "
                             f"words in a document of --length {length} (the largest offset is {length - max_words})")
        depths.append(depth)
    if len(set(depths)) != len(depths):
        raise ProbeError(f"--depths {text!r} names a depth twice")
    return depths


def check_arguments(args) -> list:
    """The parsed depths (depth task), or a ProbeError naming the first bad argument."""
    for name in ("train", "test", "length", "min_review_words", "max_review_words"):
        if getattr(args, name) < 1:
            raise ProbeError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.min_review_words > args.max_review_words:
        raise ProbeError(f"--min-review-words {args.min_review_words} is more than --max-review-words "
                         f"{args.max_review_words}")
    if args.validation < 0:
        raise ProbeError(f"--validation must be >= 0, got {args.validation}")
    depths = []
    if args.task == "depth":
        depths = parse_depths(args.depths, args.length, args.max_review_words)
        multiple, why = 2 * len(depths), f"{len(depths)} depths x 2 labels"
    else:
        if 3 * args.max_review_words > args.length:
            raise ProbeError(f"--length {args.length} is too short for three reviews of up to "
                             f"{args.max_review_words} words; give at least {3 * args.max_review_words}")
        multiple, why = 2, "2 labels, balanced"
    for name in ("train", "validation", "test"):
        if getattr(args, name) % multiple:
            raise ProbeError(f"--{name} {getattr(args, name)} must be a multiple of {multiple} ({why})")
    return depths


def group_counts(rows: list[dict]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        group = counts.setdefault(row["id"].rsplit("-", 1)[0], dict.fromkeys(LABEL_NAMES, 0))
        group[LABEL_NAMES[row["label"]]] += 1
    return dict(sorted(counts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=("depth", "majority"), default="depth")
    parser.add_argument("--output", type=Path, default=None, help="folder to write (default runs/data/reach_<task>)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="folder holding imdb/ and hyperpartisan/ (default: LONGBERT_DATA_DIR, else ../shared/data "
                             "beside the repository)")
    parser.add_argument("--train", type=int, default=2000, help="training documents")
    parser.add_argument("--validation", type=int, default=500, help="validation documents (0: none written)")
    parser.add_argument("--test", type=int, default=2000, help="test documents")
    parser.add_argument("--length", type=int, default=1500, help="words per document (whitespace words)")
    parser.add_argument("--depths", default="0,250,600,1000,end",
                        help="depth task: word offsets of the review, comma-separated; 'end' ends the document with it")
    parser.add_argument("--min-review-words", type=int, default=30, help="shortest review used, in whitespace words")
    parser.add_argument("--max-review-words", type=int, default=200, help="longest review used, in whitespace words")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        depths = check_arguments(args)
        data_dir = args.data_dir or default_data_dir()
        output = args.output or Path("runs/data") / f"reach_{args.task}"
        if output.exists() and not output.is_dir():
            raise ProbeError(f"--output {output} is a file, not a folder")
        began = time.perf_counter()
        articles = filler_pools(data_dir, args.seed)
        sizes = {"train": args.train, "validation": args.validation, "test": args.test}
        pools = review_pools(data_dir, args.min_review_words, args.max_review_words)
        reviews = draw_reviews(pools, sizes, args.task, args.seed,
                               f"{args.min_review_words} to {args.max_review_words}")
        output.mkdir(parents=True, exist_ok=True)
    except (ProbeError, OSError) as error:
        raise SystemExit(f"error: {error}") from None

    counts = {}
    for split, size in sizes.items():
        file = output / f"{split}.jsonl"
        if size == 0:
            if file.exists():  # a validation file of an earlier build would be read as this one's
                file.unlink()
                print(f"removed {file} of an earlier build (--validation 0: longbert carves validation from train)")
            continue
        rng = random.Random(f"{args.seed}:{args.task}:{split}")
        pool = articles[split]
        if args.task == "depth":
            rows = depth_documents(rng, reviews[split], pool, size, depths, args.length)
        else:
            rows = majority_documents(rng, reviews[split], pool, size, args.length)
        file.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        counts[split] = group_counts(rows)
        groups = ", ".join(f"{g} {c['neg']}/{c['pos']}" for g, c in counts[split].items())
        print(f"{file}: {size} documents of {args.length} words; neg/pos per group: {groups}")

    metadata = {
        "label_names": list(LABEL_NAMES),
        "task": args.task,
        "description": __doc__.split("\n\n")[0].replace("\n", " "),
        "settings": {"length": args.length, "depths": [depth_tag(d, args.length) for d in depths] or None,
                     "min_review_words": args.min_review_words, "max_review_words": args.max_review_words,
                     "seed": args.seed, "sizes": sizes,
                     "majority_cycle": list(MAJORITY_CYCLE) if args.task == "majority" else None},
        "sources": {"reviews": {"train": "imdb/train.jsonl.gz", "validation": "imdb/train.jsonl.gz",
                                "test": "imdb/test.jsonl.gz (less texts also in train)"},
                    "filler": {"train": f"hyperpartisan/semeval_train_all.jsonl.gz ({1 - VALIDATION_FILLER:.0%})",
                               "validation": "hyperpartisan/semeval_train_all.jsonl.gz (the other "
                                             f"{VALIDATION_FILLER:.0%})",
                               "test": "hyperpartisan/semeval_test.jsonl.gz (less texts also in semeval_train_all)"}},
        "documents": counts,
    }
    (output / "metadata.json").write_text(json.dumps(metadata, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {output / 'metadata.json'}; {time.perf_counter() - began:.1f}s in all")


if __name__ == "__main__":
    main()
