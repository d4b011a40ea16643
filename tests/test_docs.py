"""Docs that cannot rot: every link and anchor in the user-facing pages resolves, every `longbert ...` command in
README.md and docs/ parses with the real CLI, every recipe field named in prose exists, and README.md's Python
blocks run (on a tiny model). Each failure names the page and line, and what to change there."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import shlex
import subprocess
import typing
from pathlib import Path
from urllib.parse import unquote

import pytest

from helpers import TINY_STRATEGY_SETTINGS
from longbert.config import recipe_to_yaml

ROOT = Path(__file__).resolve().parents[1]
# The pages a user reads (the generated reports/*/report.md are not among them). Globs, so a new page is covered.
PAGES = ("README.md", "docs/*.md", "benchmarks/*.md", "examples/README.md", "reports/README.md",
         "benchmarks/reports/README.md")
# The pages whose `longbert ...` commands must parse: what a user types today (benchmarks/ logs what ran back then).
COMMAND_PAGES = ("README.md", "docs/*.md")
SHELL_LANGUAGES = {"bash", "sh", "shell", "console", "zsh"}

# Command lines that cannot be parsed by design, each with the reason; an entry no page holds any more fails
# test_allowed_commands_are_still_in_the_docs, so the list cannot rot either.
# For example "longbert --quiet COMMAND ... / longbert --verbose COMMAND ...": "two commands on one line, and COMMAND
# stands for any of them".
ALLOWED_COMMANDS: dict[str, str] = {}

# Dotted names in prose that are not recipe fields, each with what it is; test_not_recipe_fields_are_still_in_the_docs
# keeps the list honest.
NOT_RECIPE_FIELDS = {
    "model.settings": "a loaded model's typed settings (LongDocumentClassifier.settings), not the recipe's model",
    "data.train.pseudo_labelled": "a key of a run's metrics.json (the count self-training added), not a recipe field",
}


def pages(patterns=PAGES) -> list[Path]:
    return sorted({p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()})


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --------------------------------------------------------------------------------------------------------------
# Reading markdown: fenced blocks, prose, code spans, headings

FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^`\s]*)")


@dataclasses.dataclass
class Block:
    """A fenced code block: its language (the info string's first word, lowercased) and its (line number, text)."""
    language: str
    lines: list[tuple[int, str]]


@dataclasses.dataclass
class Page:
    path: Path
    text: str
    blocks: list[Block]
    prose: str  # the text with fenced blocks and HTML comments blanked out, line breaks kept

    @classmethod
    def read(cls, path: Path) -> "Page":
        text = path.read_text(encoding="utf-8")
        lines = text.split("\n")
        blocks, prose_lines, fence, block = [], [], None, None
        for number, line in enumerate(lines, 1):
            match = FENCE.match(line)
            if fence is None and match:
                fence, block = match.group(1), Block(match.group(2).lower(), [])
                prose_lines.append("")
            elif fence is not None:
                if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                    blocks.append(block)
                    fence = None
                else:
                    block.lines.append((number, line))
                prose_lines.append("")
            else:
                prose_lines.append(line)
        if block is not None and fence is not None:
            blocks.append(block)  # an unclosed fence runs to the end of the page, as GitHub shows it
        prose = re.sub(r"<!--.*?-->", lambda m: blank(m.group()), "\n".join(prose_lines), flags=re.S)
        return cls(path, text, blocks, prose)

    def line_of(self, offset: int) -> int:
        return self.prose.count("\n", 0, offset) + 1

    def code_spans(self) -> list[tuple[int, str]]:
        """(line, content) of every inline code span in the prose; a span may wrap onto the next line."""
        return [(self.line_of(m.start()), " ".join(m.group(2).split())) for m in CODE_SPAN.finditer(self.prose)]

    def prose_without_code(self) -> str:
        return CODE_SPAN.sub(lambda m: blank(m.group()), self.prose)


# A code span: a run of backticks, content that holds no blank line, the same run again.
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)


def blank(text: str) -> str:
    """`text` as spaces, its line breaks kept (so that offsets still give line numbers)."""
    return re.sub(r"[^\n]", " ", text)


ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ANCHOR = re.compile(r"""<a\s[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)


def heading_texts(page: Page) -> list[str]:
    lines = page.prose.split("\n")
    out = []
    for i, line in enumerate(lines):
        match = ATX_HEADING.match(line)
        if match:
            out.append(match.group(2))
        elif i and SETEXT_UNDERLINE.match(line) and lines[i - 1].strip() and not lines[i - 1].lstrip().startswith(
                ("|", "-", "*", ">", "#")):
            out.append(lines[i - 1].strip())
    return out


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text as rendered (code spans, emphasis, links and HTML tags reduced to
    their text), lowercased, everything but letters, digits, `_`, `-` and spaces dropped, each space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = re.sub(r"(`+)(.+?)\1", r"\2", text)  # code spans: their content
    text = re.sub(r"(?<![\w*])(\*{1,3}|_{1,3})(?=\S)(.+?)(?<=\S)\1(?![\w*])", r"\2", text)  # emphasis
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Page) -> set[str]:
    """Every anchor a link may name on the page: its headings' slugs (a repeated one gets -1, -2, ... as on GitHub)
    and explicit <a id=...> / <a name=...>."""
    out, seen = set(), {}
    for heading in heading_texts(page):
        slug = github_slug(heading)
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}-{seen[slug]}"
        else:
            seen[slug] = 0
        out.add(slug)
    return out | set(HTML_ANCHOR.findall(page.prose))


# --------------------------------------------------------------------------------------------------------------
# 1. Links and anchors

# [text](target "title") and ![alt](src): the text may hold one level of brackets.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_USE = re.compile(r"(?<!\\)\[((?:[^\[\]]|\[[^\[\]]*\])+)\]\[([^\]]*)\]")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(<[^>]*>|\S+)", re.M)
HTML_LINK = re.compile(r"""<(?:a|img)\s[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def links(page: Page) -> list[tuple[int, str]]:
    """(line, target) of every link on the page outside code: inline, reference-style (the definitions' targets, and
    a use of an undefined label as the target `[label]?`), and HTML <a href>/<img src>."""
    prose = page.prose_without_code()
    out = [(page.line_of(m.start()), m.group(1).strip("<>")) for m in INLINE_LINK.finditer(prose)]
    definitions = {m.group(1).lower(): (page.line_of(m.start()), m.group(2).strip("<>"))
                   for m in REFERENCE_DEFINITION.finditer(prose)}
    out += definitions.values()
    for m in REFERENCE_USE.finditer(prose):
        label = (m.group(2) or m.group(1)).lower()
        if label not in definitions:
            out.append((page.line_of(m.start()), f"[{label}]?"))
    out += [(page.line_of(m.start()), m.group(1)) for m in HTML_LINK.finditer(prose)]
    return sorted(out)


_ANCHORS: dict[Path, set[str]] = {}


def anchors_of(path: Path) -> set[str]:
    if path not in _ANCHORS:
        _ANCHORS[path] = anchors(Page.read(path))
    return _ANCHORS[path]


def ignored_by_git(paths: list[Path]) -> set[Path]:
    """Those of `paths` that git ignores (a clone does not have them); none when git cannot tell."""
    if not paths:
        return set()
    try:
        done = subprocess.run(["git", "check-ignore", "--stdin"], cwd=ROOT, input="\n".join(map(str, paths)),
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return set()
    return {Path(line) for line in done.stdout.splitlines()} if done.returncode in (0, 1) else set()


def broken_links(page: Page) -> list[str]:
    problems, found = [], []
    for line, target in links(page):
        if target.endswith("]?"):
            problems.append(f"{page_id(page.path)}:{line}: [{target[1:-2]}] is used as a reference link but no "
                            f"`[{target[1:-2]}]: target` line defines it")
            continue
        if SCHEME.match(target) or target.startswith("//"):
            continue  # http(s), mailto and the like: not checked offline
        where, _, anchor = target.partition("#")
        where = unquote(where)
        if not where:
            destination = page.path
        else:
            destination = ((ROOT / where.lstrip("/")) if where.startswith("/") else page.path.parent / where)
            destination = Path(*destination.parts).resolve()
            if ROOT not in (destination, *destination.parents):
                problems.append(f"{page_id(page.path)}:{line}: ({target}) points outside the repository: a clone "
                                "does not have it; link to the page on the web, or name it as text")
                continue
            if not destination.exists():
                problems.append(f"{page_id(page.path)}:{line}: ({target}): {destination.relative_to(ROOT)} does not "
                                "exist")
                continue
            found.append((line, target, destination))
        if anchor and destination.suffix == ".md" or (anchor and destination.is_dir()
                                                      and (destination / "README.md").is_file()):
            shown = destination if destination.suffix == ".md" else destination / "README.md"
            if unquote(anchor) not in anchors_of(shown):
                problems.append(f"{page_id(page.path)}:{line}: ({target}): {shown.relative_to(ROOT)} has no heading "
                                f"whose anchor is #{anchor}{nearest_anchor(anchor, anchors_of(shown))}")
    ignored = ignored_by_git([d for _, _, d in found])
    problems += [f"{page_id(page.path)}:{line}: ({target}): {d.relative_to(ROOT)} is ignored by git, so a clone "
                 "does not have it" for line, target, d in found if d in ignored]
    return problems


def nearest_anchor(anchor: str, candidates: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(anchor, sorted(candidates), n=1, cutoff=0.5)
    return f" (did you mean #{close[0]}?)" if close else ""


@pytest.mark.parametrize("path", pages(), ids=page_id)
def test_every_relative_link_and_anchor_resolves(path):
    problems = broken_links(Page.read(path))
    assert not problems, f"{len(problems)} broken link(s):\n" + "\n".join(problems)


def test_slugs_follow_githubs_rule():
    assert github_slug("The head stage's length swept on an H100, and IMDb's seed spread") == \
        "the-head-stages-length-swept-on-an-h100-and-imdbs-seed-spread"
    assert github_slug("3,000 reviews: early stopping") == "3000-reviews-early-stopping"
    assert github_slug("`longbert compare`: the *report*") == "longbert-compare-the-report"
    assert github_slug("Time and memory — against length") == "time-and-memory--against-length"
    assert github_slug("train.head_first and max_tokens") == "trainhead_first-and-max_tokens"
    page = Page(Path("x.md"), "", [], "# A\n\n## A\n\n## A\n\n<a id=\"here\"></a>\n")
    assert anchors(page) == {"a", "a-1", "a-2", "here"}


# --------------------------------------------------------------------------------------------------------------
# 2. Every `longbert ...` command parses with the real CLI

@dataclasses.dataclass
class Command:
    page: Path
    line: int
    text: str  # as written, the comment cut off
    words: list[str] | None  # the arguments after `longbert`; None when the line does not split into shell words
    inline: bool  # from a code span in prose: a command named in passing may leave required arguments out

    @property
    def where(self) -> str:
        return f"{page_id(self.page)}:{self.line}"


SHELL_OPERATORS = {"|", "||", "&&", ";", "&", "(", ")"}
REDIRECTIONS = {">", ">>", "<", ">&", "<&", "&>"}


def shell_words(text: str) -> list[str] | None:
    """The words of a shell line, operators apart, the comment cut off, `<name>` placeholders as NAME; None when it
    does not tokenize."""
    text = re.sub(r"<([A-Za-z][\w-]*)>", lambda m: m.group(1).upper().replace("-", "_"), text)  # <name>: NAME
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return None


def longbert_invocations(words: list[str]) -> list[list[str]]:
    """The arguments of every `longbert ...` (and `... -m longbert.cli ...`) in a shell line's words: the line is cut
    at pipes, `&&` and `;`, and redirections are dropped."""
    segments, current = [], []
    for word in words:
        if word in SHELL_OPERATORS:
            segments.append(current)
            current = []
        else:
            current.append(word)
    segments.append(current)
    out = []
    for segment in segments:
        kept, skip = [], False
        for word in segment:
            if skip:
                skip = False
            elif word in REDIRECTIONS:
                skip = True
            else:
                kept.append(word)
        if kept and kept[0] == "longbert":
            out.append(kept[1:])
        elif "longbert.cli" in kept and kept.index("longbert.cli") > 0 and kept[kept.index("longbert.cli") - 1] == "-m":
            out.append(kept[kept.index("longbert.cli") + 1:])
    return out


def commands(page: Page) -> list[Command]:
    out = []
    for block in page.blocks:
        if block.language not in SHELL_LANGUAGES:
            continue
        joined: list[tuple[int, str]] = []
        for number, line in block.lines:  # a line ending in a backslash continues on the next
            if joined and joined[-1][1].endswith("\\"):
                joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + line.strip())
            else:
                joined.append((number, line.strip()))
        for number, line in joined:
            line = re.sub(r"^\$\s+", "", line)
            if "longbert" not in line:
                continue
            words = shell_words(line)
            text = re.sub(r"\s+#(\s.*)?$", "", line)
            if words is None:
                out.append(Command(page.path, number, text, None, False))
            else:
                out += [Command(page.path, number, text, args, False) for args in longbert_invocations(words)]
    for number, span in page.code_spans():
        if span.startswith("longbert "):
            words = shell_words(span) or []
            out += [Command(page.path, number, span, args, True) for args in longbert_invocations(words)]
    return out


PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")


def unbracketed(words: list[str]) -> list[str]:
    """The words with `[...]` optional groups opened (their longest form) and `...` kept only as an option's value."""
    out, depth = [], 0
    for word in words:
        while word.startswith("[") and word != "[]":
            word, depth = word[1:], depth + 1
        while word.endswith("]") and depth:
            word, depth = word[:-1], depth - 1
        if word:
            out.append(word)
    return out


def sample_value(command, param, word: str) -> str:
    """A value of `param`'s type (read from the command function's annotation) standing for a placeholder (N, PORT,
    ...) or `...`; other words as written."""
    if not (PLACEHOLDER.match(word) or word == "..."):
        return word
    kind = typing.get_type_hints(command.callback).get(param.name)
    kinds = set(typing.get_args(kind)) | {kind}
    if kinds & {int, float}:
        return "1" if int in kinds else "0.5"
    return word


def prepared(command, words: list[str]) -> list[str]:
    """`words` as `command` will parse them: placeholder option values replaced by a value of the option's type, and
    `...` (more of the same) dropped where it is not an option's value."""
    options = {opt: p for p in command.params if p.param_type_name == "option"
               for opt in (*p.opts, *p.secondary_opts)}
    out, expecting = [], None
    for word in words:
        if expecting is not None:
            out.append(sample_value(command, expecting, word))
            expecting = None
            continue
        param = options.get(word)
        if param is not None and not param.is_flag and not param.count:
            expecting = param
        if word != "...":
            out.append(word)
    return out


def acts_and_exits(command, words: list[str]) -> bool:
    """Whether `words` holds one of `command`'s options that act and exit (--help, --version, --install-completion):
    named right, they are not run here (one would install shell completion)."""
    context = command.context_class(command, info_name=command.name)
    acting = {opt for p in command.get_params(context) if p.callback is not None and (p.is_eager or not p.expose_value)
              for opt in p.opts}
    return any(word in acting for word in words)


def click_exceptions(command):
    """The exceptions of the click that built `command`: click's own, or the copy that newer typers carry inside."""
    import importlib

    core = next(c.__module__ for c in type(command).__mro__ if c.__module__.endswith(".core")
                and not c.__module__.startswith("typer.core"))
    return importlib.import_module(core.rsplit(".", 1)[0] + ".exceptions")


def cli_problem(cmd: Command) -> str | None:
    """What the CLI says to the command's arguments (parsed, never run), or None when they parse."""
    import typer

    from longbert.cli import app

    group = typer.main.get_command(app)
    errors = click_exceptions(group)
    words = unbracketed(cmd.words)
    own = words[:next((i for i, word in enumerate(words) if not word.startswith("-")), len(words))]
    words = [*prepared(group, own), *words[len(own):]]  # the group's options; the command's come below
    try:
        if acts_and_exits(group, own):
            return None
        with group.make_context("longbert", words, resilient_parsing=False) as parent:
            protected = getattr(parent, "_protected_args", None)
            rest = [*(parent.protected_args if protected is None else protected), *parent.args]
            if not rest:
                return None
            name, sub, rest = group.resolve_command(parent, rest)
            rest = prepared(sub, rest)
            if acts_and_exits(sub, rest):
                return None
            with sub.make_context(name, rest, parent=parent, resilient_parsing=False):
                return None
    except errors.MissingParameter as error:
        return None if cmd.inline else error.format_message()
    except errors.UsageError as error:
        return error.format_message()
    except (typer.Exit, getattr(errors, "Exit", typer.Exit)):
        return None


@pytest.mark.parametrize("path", pages(COMMAND_PAGES), ids=page_id)
def test_every_longbert_command_parses(path, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # should an option that acts ever run, it acts in here
    problems = []
    for cmd in commands(Page.read(path)):
        if cmd.text in ALLOWED_COMMANDS:
            continue
        problem = "it does not split into shell words (an unclosed quote?)" if cmd.words is None else cli_problem(cmd)
        if problem:
            problems.append(f"{cmd.where}: `{cmd.text}`: {problem}")
    assert not problems, (f"{len(problems)} command(s) the CLI would refuse (fix the command, or, if it cannot parse "
                          "by design, add it with its reason to ALLOWED_COMMANDS in tests/test_docs.py):\n"
                          + "\n".join(problems))


def test_allowed_commands_are_still_in_the_docs():
    written = {cmd.text for path in pages(COMMAND_PAGES) for cmd in commands(Page.read(path))}
    gone = [text for text in ALLOWED_COMMANDS if text not in written]
    assert not gone, f"no page holds these any more; remove them from ALLOWED_COMMANDS: {gone}"


def test_the_command_check_refuses_what_the_cli_refuses(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    check = lambda text, inline=False: cli_problem(Command(ROOT, 1, text, longbert_invocations(shell_words(text))[0],
                                                           inline))
    assert check("longbert compare --strategies truncate,chunk [--recipe BASE] [--set ...] [--seeds N]") is None
    assert check("longbert ensemble RUN RUN ... --output DIR [--all]") is None
    assert check("longbert --version") is None and check("longbert --install-completion") is None
    assert not any(tmp_path.iterdir()), "an option that acts ran"
    assert check("longbert report reports/<name> [reports/<name> ...]") is None
    assert check("longbert export", inline=True) is None
    assert "--seed" in check("longbert compare --strategies chunk --seed 2")
    assert "Missing" in check("longbert export")
    assert "trian" in check("longbert trian RECIPE")
    assert "extra argument" in check("longbert evaluate RUN test")


# --------------------------------------------------------------------------------------------------------------
# 3. Every recipe field named in prose exists

FILE_SUFFIXES = {"json", "jsonl", "gz", "csv", "tsv", "parquet", "txt", "md", "py", "yaml", "yml", "html", "npy",
                 "png", "svg", "safetensors", "onnx", "bin", "pt", "log", "sh", "toml", "cfg"}


def recipe_schemas() -> list[type]:
    from longbert.config.pretrain_recipe import PretrainRecipe
    from longbert.config.recipe import Recipe

    return [Recipe, PretrainRecipe]


def strategy_fields() -> dict[str, set[str]]:
    from longbert.strategies.base import REGISTRY
    from longbert.strategies.registry import strategy_names

    return {name: {f.name for f in dataclasses.fields(REGISTRY[name].config_cls)} for name in strategy_names()}


def sections() -> dict[str, list]:
    """Each first word of a field's path, with what may follow it: the recipes' sections (dataclasses), `strategy`
    (the fields of every registered strategy), and each strategy's name (its own fields, compare's
    `<strategy>.<field>`)."""
    out: dict[str, list] = {}
    for schema in recipe_schemas():
        hints = typing.get_type_hints(schema)
        for f in dataclasses.fields(schema):
            if dataclasses.is_dataclass(hints[f.name]):
                out.setdefault(f.name, []).append(hints[f.name])
    by_strategy = strategy_fields()
    out["strategy"] = [set().union(*by_strategy.values())]
    for name, fields in by_strategy.items():
        out.setdefault(name, []).append(fields)
    return out


def field_problem(path: list[str], known: dict[str, list]) -> str | None:
    """None when some schema has the dotted `path` (`*` stands for any field), else what is wrong with it."""
    closest = []
    for schema in known[path[0]]:
        kind, walked = schema, [path[0]]
        for part in path[1:]:
            names = {f.name for f in dataclasses.fields(kind)} if dataclasses.is_dataclass(kind) else (
                kind if isinstance(kind, set) else set())
            if part != "*" and part not in names:
                closest.append((len(walked), ".".join(walked), names))
                break
            walked.append(part)
            if isinstance(kind, set) or part == "*":
                kind = set()
            else:
                kind = typing.get_type_hints(kind)[part]
                kind = kind if dataclasses.is_dataclass(kind) else set()
        else:
            return None
    depth, where, names = max(closest, key=lambda c: c[0])
    if not names:
        return f"{where} has no fields below it"
    import difflib

    near = difflib.get_close_matches(path[len(where.split("."))], sorted(names), n=1)
    hint = f" (did you mean {where}.{near[0]}?)" if near else f"; its fields: {', '.join(sorted(names))}"
    return f"{where} has no field {path[len(where.split('.'))]}{hint}"


FIELD = re.compile(r"(?<![\w./$<-])([a-z]+)\.([A-Za-z_*][\w*]*(?:\.[A-Za-z_*][\w*]*)*)(?![\w(/-])")
SET_OVERRIDE = re.compile(r"--set[ =]+[\"']?([a-z_]+(?:\.[A-Za-z_*][\w*]*)+)=")
QUOTED_OVERRIDE = re.compile(r"[\"']([a-z_]+(?:\.[A-Za-z_][\w]*)+)=[^\"']*[\"']")


def python_names() -> set[str]:
    """The Python API's attributes on the objects a page calls `model` or `result` (model.predict,
    model.save_pretrained): not recipe fields."""
    from longbert.modeling.classifier import LongDocumentClassifier

    return {name for name in dir(LongDocumentClassifier) if not name.startswith("_")}


def named_fields(page: Page) -> list[tuple[int, str]]:
    """(line, dotted path) of every recipe field the page names: in code spans, in `--set key=value` and in quoted
    "key=value" overrides of code blocks, and every key of a YAML block that holds a recipe section."""
    known = sections()
    out = []
    for line, span in page.code_spans():
        out += [(line, m.group(0)) for m in FIELD.finditer(span) if m.group(1) in known]
    for block in page.blocks:
        for line, text in block.lines:
            out += [(line, m.group(1)) for m in SET_OVERRIDE.finditer(text)]
            if block.language in ("python", "py"):
                out += [(line, m.group(1)) for m in QUOTED_OVERRIDE.finditer(text)]
        if block.language in ("yaml", "yml"):
            out += yaml_fields(block, known)
    out = [(line, name) for line, name in out if name.split(".")[0] in known]
    methods = python_names()
    return [(line, name) for line, name in out if name.rsplit(".", 1)[-1] not in FILE_SUFFIXES
            and not (name.split(".")[0] == "model" and name.split(".")[1] in methods)]


def yaml_fields(block: Block, known: dict[str, list]) -> list[tuple[int, str]]:
    """(line, dotted path) of every key in a YAML block whose top-level keys include a recipe section (a strategy
    section's keys are checked against the strategy it names)."""
    import yaml

    text = "\n".join(line for _, line in block.lines)
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return []
    if not isinstance(node, yaml.MappingNode) or not any(k.value in known for k, _ in node.value):
        return []
    first = block.lines[0][0] if block.lines else 0
    out = []

    def walk(mapping, prefix):
        for key, value in mapping.value:
            path = [*prefix, str(key.value)]
            if len(path) > 1:
                out.append((first + key.start_mark.line, ".".join(path)))
            if isinstance(value, yaml.MappingNode) and not (path[0] == "strategy" and len(path) > 1):
                named = {k.value: v.value for k, v in value.value if isinstance(v, yaml.ScalarNode)}
                walk(value, [named["name"]] if path == ["strategy"] and named.get("name") in known else path)

    walk(node, [])
    return [(line, name) for line, name in out if name.split(".")[0] in known]


@pytest.mark.parametrize("path", pages(), ids=page_id)
def test_every_recipe_field_named_exists(path):
    known = sections()
    problems = []
    for line, name in named_fields(Page.read(path)):
        problem = None if name in NOT_RECIPE_FIELDS else field_problem(name.split("."), known)
        if problem:
            problems.append(f"{page_id(path)}:{line}: {name}: {problem}")
    assert not problems, (f"{len(problems)} recipe field(s) that no recipe has (longbert/config/recipe.py, "
                          "pretrain_recipe.py, the strategies' configs; `longbert strategies` lists those):\n"
                          + "\n".join(problems))


def test_not_recipe_fields_are_still_in_the_docs():
    named = {name for path in pages() for _, name in named_fields(Page.read(path))}
    gone = [name for name in NOT_RECIPE_FIELDS if name not in named]
    assert not gone, f"no page names these any more; remove them from NOT_RECIPE_FIELDS: {gone}"


def test_the_field_check_knows_every_kind_of_field():
    known = sections()
    for name in ("train.head_first", "data.max_train_documents", "strategy.pooling", "chunk.window", "backbone.name",
                 "model.finetune", "eval.batch_size", "masking.probability", "masking.*", "model.lora.r",
                 "train.head_steps", "bigbird.global_bias", "strategy.segment"):
        assert field_problem(name.split("."), known) is None, name
    assert "train.head_first" in field_problem(["train", "head_frist"], known)
    assert "chunk has no field stride" in field_problem(["chunk", "stride"], known)
    assert "data.path has no fields" in field_problem(["data", "path", "x"], known)
    page = Page(Path("x.md"), "", [], "Set `train.epochs: 3`, `model.predict(texts)`, `train.jsonl` and "
                "`longbert.train`;\n`--set chunk.window=126`.\n")
    assert named_fields(page) == [(1, "train.epochs"), (2, "chunk.window")]


# --------------------------------------------------------------------------------------------------------------
# 4. README.md's Python blocks run, on a tiny model

def python_blocks() -> list[Block]:
    readme = Page.read(ROOT / "README.md")
    return [b for b in readme.blocks if b.language in ("python", "py")]


def tiny_data(folder: Path) -> Path:
    """A folder of train.jsonl and test.jsonl: 16 + 4 short documents, labels neg and pos."""
    words = {"neg": "dull flat tedious weak boring", "pos": "bright warm moving sharp superb"}
    folder.mkdir()
    for split, n in (("train", 16), ("test", 4)):
        rows = [{"text": " ".join([words[label]] * (3 + i % 5) + ["the film ran long"] * (i % 7)), "label": label}
                for i in range(n) for label in ("neg", "pos")][:n]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def displayed(block: Block) -> ast.Module:
    """The block's code with each top-level expression's value kept in `__shown__`, as a notebook shows it."""
    tree = ast.parse("\n".join(line for _, line in block.lines))
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.Expr):
            call = ast.Call(ast.Attribute(ast.Name("__shown__", ast.Load()), "append", ast.Load()), [node.value], [])
            tree.body[i] = ast.copy_location(ast.Expr(call), node)
    return ast.fix_missing_locations(tree)


def labelled(value, labels: set[str]) -> bool:
    """Whether `value` is (or holds) a prediction: a dict whose 'label' is one of `labels`."""
    if isinstance(value, dict):
        return value.get("label") in labels
    return isinstance(value, (list, tuple)) and any(labelled(v, labels) for v in value)


def test_readme_python_blocks_run_on_a_tiny_model(tiny_backbone_dir, tmp_path, monkeypatch, capsys):
    """Each ```python block of README.md runs top to bottom, in one namespace, as a reader would paste them:
    `longbert.load_recipe` appends overrides that make the run tiny (the tiny BERT, 16 documents, one epoch; a Recipe
    built in Python is made tiny the same way when it is trained), and a
    path under runs/ that the blocks name stands for the tiny run's folder. Each block must show a prediction."""
    import longbert

    blocks = python_blocks()
    assert blocks, "README.md has no ```python block: the Python API needs one example that runs"
    data = tiny_data(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    runs: list[Path] = []
    original = longbert.load_recipe

    def tiny_load_recipe(path=None, overrides=()):
        strategy = original(path, list(overrides)).strategy.name
        output_dir = tmp_path / "runs" / f"tiny-{len(runs)}"
        recipe = original(path, [*overrides, *tiny_overrides(tiny_backbone_dir, data, output_dir),
                                 *TINY_STRATEGY_SETTINGS[strategy]])
        runs.append(Path(recipe.output_dir))
        return recipe

    monkeypatch.setattr(longbert, "load_recipe", tiny_load_recipe)
    original_train = longbert.train

    def tiny_train(recipe=None, **kwargs):
        """A Recipe built in Python trains on the tiny BERT, for two steps, in a folder under tmp_path; its own data
        settings and the documents it is given stay."""
        if isinstance(recipe, longbert.Recipe) and Path(recipe.output_dir or "") not in runs:
            saved = tmp_path / f"python-recipe-{len(runs)}.yaml"
            saved.write_text(recipe_to_yaml(recipe))
            output_dir = tmp_path / "runs" / f"tiny-{len(runs)}"
            recipe = original(saved, [f"backbone.name={tiny_backbone_dir}", "train.max_steps=2", "train.batch_size=4",
                                      "train.head_first=false", "train.mixed_precision=no", "eval.batch_size=8",
                                      "data.max_document_tokens=400", f"output_dir={output_dir}",
                                      *TINY_STRATEGY_SETTINGS[recipe.strategy.name]])
            runs.append(Path(recipe.output_dir))
        return original_train(recipe, **kwargs)

    monkeypatch.setattr(longbert, "train", tiny_train)
    namespace: dict = {"__name__": "__readme__", "__shown__": []}
    for block in blocks:
        stand_in_for_run_folders(block, runs, tmp_path)
        start = block.lines[0][0] if block.lines else 0
        namespace["__shown__"] = []
        try:
            exec(compile(displayed(block), f"README.md (the python block at line {start})", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"README.md: the python block at line {start} fails: {type(error).__name__}: "
                                 f"{error}") from error
        printed = capsys.readouterr().out
        assert labelled(namespace["__shown__"], {"neg", "pos"}) or re.search(r"'label': '(neg|pos)'", printed), (
            f"README.md: the python block at line {start} shows no prediction (no printed or displayed dict with a "
            f"'label'); it printed {printed!r} and showed {namespace['__shown__']!r}")


def tiny_overrides(backbone: str, data: Path, output_dir: Path) -> list[str]:
    """What makes any fine-tuning recipe train in seconds: the tiny BERT, the tiny data, one short epoch; the stages
    that a recipe may add (head first, contrastive pairs, self-training) off."""
    return [f"backbone.name={backbone}", f"data.path={data}", "data.hub_config=null", "data.train_split=train",
            "data.validation_split=null", "data.test_split=test", "data.unlabelled_split=null",
            "data.text_column=text", "data.label_column=label", "data.label_names=null", "data.id_column=null",
            "data.validation_fraction=0.25", "data.max_train_documents=null", "data.max_eval_documents=null",
            "data.max_test_documents=null", "data.test_longer_than=0", "data.validation_longer_than=0",
            "data.max_document_tokens=400", "model.problem_type=single_label", "model.class_weights=null",
            "train.epochs=1", "train.max_steps=2", "train.batch_size=4", "train.head_first=false",
            "train.contrastive_pairs=0", "train.self_training_documents=0", "train.init_from=null",
            "train.mixed_precision=no", "train.best_metric=macro_f1", "train.report_to=none", "eval.batch_size=8",
            f"output_dir={output_dir}"]


def stand_in_for_run_folders(block: Block, runs: list[Path], root: Path) -> None:
    """Make each `runs/<name>/...` path the block names (a run the README trained with `longbert train`) a link to
    the tiny run's folder, under the test's working folder."""
    if not runs:
        return
    for name in re.findall(r"[\"']runs/([A-Za-z0-9._-]+)", "\n".join(line for _, line in block.lines)):
        folder = root / "runs" / name
        if not folder.exists():
            folder.parent.mkdir(exist_ok=True)
            folder.symlink_to(runs[-1], target_is_directory=True)
