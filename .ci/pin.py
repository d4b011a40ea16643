"""Write constraints.txt: the exact version of every installed distribution that `longbert[dev]` needs, directly or
through its dependencies, as the suite last passed with it.

    python .ci/pin.py            # after the suite passed in this environment: rewrite constraints.txt
    python .ci/pin.py --check    # exit 1 when the environment differs from constraints.txt (what differs is listed)

The package's own requirements (pyproject.toml) stay ranges, so users are not pinned; CI and the README's test set-up
install through these constraints, so that a new release of a dependency cannot turn main red, or change a result,
unseen. `bash .ci/latest` shows the drift: the newest versions in a fresh virtual environment, then the suite.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
HEADER = ("# The exact versions the test suite last passed with (python .ci/pin.py writes this file; .ci/run and the\n"
          "# README's test set-up install through it). Users are not pinned: pyproject.toml keeps ranges.\n")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str, extras: tuple[str, ...]) -> dict[str, str]:
    """{canonical name: installed version} of every distribution `root[extras]` needs (root itself left out)."""
    found: dict[str, str] = {}
    pending = [(root, extras)]
    seen: set[tuple[str, tuple[str, ...]]] = set()
    while pending:
        name, wanted = pending.pop()
        if (canonical(name), wanted) in seen:
            continue
        seen.add((canonical(name), wanted))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional requirement whose marker held but that is not installed: nothing to pin
        if canonical(name) != canonical(root):
            found[canonical(name)] = dist.version
        for line in dist.requires or []:
            requirement = Requirement(line)
            applies = requirement.marker is None or any(
                requirement.marker.evaluate({**default_environment(), "extra": extra}) for extra in ("", *wanted)
            )
            if applies:
                pending.append((requirement.name, tuple(sorted(requirement.extras))))
    return found


def render(pins: dict[str, str]) -> str:
    # A local label (torch's "+cpu") is left out: `torch==2.13.0` matches the CPU build the install line names.
    return HEADER + "".join(f"{name}=={version.split('+')[0]}\n" for name, version in sorted(pins.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the environment with constraints.txt")
    args = parser.parse_args()
    text = render(closure("longbert", ("dev",)))
    if not args.check:
        CONSTRAINTS.write_text(text)
        print(f"wrote {CONSTRAINTS.relative_to(ROOT)}: {text.count('==')} pins")
        return 0
    old = set(CONSTRAINTS.read_text().splitlines()) if CONSTRAINTS.exists() else set()
    new = set(text.splitlines())
    for line in sorted(old ^ new):
        if not line.startswith("#"):
            print(("now " if line in new else "pinned ") + line)
    return 0 if old == new else 1


if __name__ == "__main__":
    sys.exit(main())
