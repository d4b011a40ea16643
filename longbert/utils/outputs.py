"""How a command writes an output folder (a model, a run's best/, an ensemble, a hybrid, an export, a report, a
checkpoint), with the rules that keep what it did not write:

- before any work, the folder it is given must be new, empty, or an earlier output of the same kind (it holds that
  kind's marker file): anything else is refused in one line (`replaceable_folder`, `named_folder`);
- the folder is written beside its place and swapped in when complete (`atomic_folder`), so it appears whole or not at
  all; at the swap, what the place holds is checked again, so a folder that appeared while the command ran is refused,
  not replaced (`swap_in`);
- a replacement removes only what the command wrote there before (each output folder lists every path it wrote, at
  every depth, in .longbert-written); a user's own files in or beside an output, at any depth, are moved back into
  the new folder, never deleted (`keep_others`); a damaged list is refused before anything moves;
- a swap that a kill interrupted is finished by the next command that writes or reads that folder (`finish_swaps`),
  and by `recover` for what a run folder holds; each says so in one line.

Files (a page, a predictions file) are written whole by longbert.utils.atomic.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from longbert.errors import LongbertError
from longbert.utils.atomic import LEFTOVER, disk_error, os_error_of, process_alive, public_mode, sweep
from longbert.utils.logs import get_logger


def named_folder(target: str | Path, what: str) -> Path:
    """`target` as a Path, refused in one line when it names no folder of its own ('' and '.' are the working
    folder, '..' its parent): such a path cannot be swapped by a rename, and replacing it would take its contents."""
    path = Path(target).expanduser()
    if path.name in ("", ".", ".."):
        raise LongbertError(f"{what} {str(target)!r} names no folder of its own; name a new folder to write")
    return path


def replaceable_folder(target: str | Path, marker: str, what: str = "output folder") -> Path:
    """`target` checked before any work is done: a folder that a write of this kind may write. It may when it does
    not exist, is empty, or holds `marker`, the file every folder of this kind is written with (so it is an earlier
    output of the same command, whose own files `atomic_folder` replaces). Anything else is refused in one
    LongbertError line: a folder named by mistake (the run folder itself, a folder of other files) is not an output.
    A path that names no folder of its own ('' or '.', '..') is refused too."""
    path = named_folder(target, what)
    finish_swaps(path)
    if not path.exists() and not path.is_symlink():
        return path
    if not path.is_dir():
        raise LongbertError(f"{what} {path} is a file, not a folder")
    if (path / marker).is_file() or not any(path.iterdir()):
        return path
    raise LongbertError(f"{what} {path} already holds files this command did not write (it has no {marker}); "
                        "name a new or empty folder")


@contextmanager
def atomic_folder(target: str | Path, marker: str | None = None, what: str = "output folder") -> Iterator[Path]:
    """Yield a staging folder beside `target`. When the block finishes, what it wrote replaces this command's earlier
    files in `target` (`swap_in`: two renames, then anything else the folder held put back, so that a user's own
    files beside an output survive its replacement); when it fails, the staging folder is removed and `target` is
    left as it was. A write that fails (a full disk, a read-only place: an OSError, or a SafetensorError wrapping one,
    from the block or the swap) is one LongbertError line naming `target` (`disk_error`); any other error, Ctrl-C
    included, passes through unchanged.

    `marker`: the file the block writes into every folder of its kind; an existing `target` is then replaced only
    when `replaceable_folder` allows it (one LongbertError line naming it as `what` otherwise), checked before the
    block and again at the swap. Without a marker, only a `target` that does not exist or is empty is written: a
    folder that appeared with files in it while the block ran is refused, not replaced."""
    if marker is not None:
        target = replaceable_folder(target, marker, what)  # which finishes an interrupted swap first
    else:
        target = named_folder(target, what)
        finish_swaps(target)
    if target.is_symlink():  # written where the link points, which stays a link (no swapped-out link left behind)
        target = target.resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        sweep(target)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-{os.getpid()}-", dir=target.parent))
    except OSError as error:
        raise disk_error(error, target) from None
    try:
        yield staging
        for path in (staging, *staging.rglob("*")):  # mkdtemp and safetensors make files private
            if not path.is_symlink():
                public_mode(path)
        swap_in(staging, target, marker, what)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        failed = os_error_of(error)
        if failed is None:
            raise
        raise disk_error(failed, target) from None


WRITTEN = ".longbert-written"  # in an output folder: {"paths": every path, at every depth, its writer wrote}


def written_paths(staging: Path) -> list[str]:
    """Every path under `staging`, relative to it, folders and files, in order: what the folder's writer wrote."""
    return sorted(str(p.relative_to(staging)) for p in staging.rglob("*"))


def read_written(folder: Path) -> tuple[set[str], bool] | None:
    """What the writer of `folder` wrote, from its WRITTEN list: (the paths, whether they go below the top level: a
    list of every path, as written since it went to every depth, or the top-level names of older folders); None
    when the folder has no list. A list that is not one of these raises a LongbertError naming it."""
    file = folder / WRITTEN
    if not file.is_file():
        return None
    try:
        raw = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise LongbertError(f"{file} is damaged ({error}); nothing was moved: put it back, or remove the folder's "
                            "own files by hand") from None
    deep = isinstance(raw, dict)
    paths = raw.get("paths") if deep else raw
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise LongbertError(f"{file} is damaged (not a list of the paths its writer wrote); nothing was moved: put "
                            "it back, or remove the folder's own files by hand")
    return set(paths), deep


def swap_in(staging: Path, target: Path, marker: str | None, what: str) -> None:
    """Put the folder written in `staging` in `target`'s place. What `target` holds now is checked again (a folder may
    have appeared, or been filled, while the command ran): it must be missing, empty, or (with a `marker`) an earlier
    output of this kind. Then two renames swap the folders, and every entry of the old one that its writer did not
    write (its WRITTEN list; without one, every entry the new folder does not hold) is moved back: only this
    command's earlier files go. A kill between the renames leaves the old folder aside, which `recover` puts back."""
    (staging / WRITTEN).write_text(json.dumps({"paths": written_paths(staging)}))
    if not target.exists() and not target.is_symlink():
        try:
            os.rename(staging, target)
            return
        except OSError as error:  # a folder of that name appeared after the check, with files in it
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    if not target.is_dir() or (any(target.iterdir()) and (marker is None or not (target / marker).is_file())):
        raise LongbertError(f"{what} {target} appeared or changed while this command ran and holds files it did not "
                            "write; nothing was replaced: name a new folder")
    read_written(target)  # a damaged list is refused now, before anything moves
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    os.replace(target, old)
    try:
        os.replace(staging, target)
    except BaseException:
        with suppress(OSError):
            os.replace(old, target)  # the second rename failed: the older folder goes back
        raise
    keep_others(old, target)


def keep_others(old: Path, target: Path) -> list[str]:
    """Move back into `target` every entry of the swapped-out folder `old`, at any depth, that its writer did not
    write and that `target` does not hold, then remove `old`. Returns the paths moved back (relative to the
    folder)."""
    recorded = read_written(old)
    if recorded is None:  # written before the list existed: what the new folder holds is the writer's
        ours, deep = {p.name for p in target.iterdir()}, False
    else:
        ours, deep = recorded
    ours |= {WRITTEN}
    moved: list[str] = []

    def walk(folder: Path) -> None:
        for entry in sorted(folder.iterdir()):
            relative = str(entry.relative_to(old))
            if relative in ours:
                if deep and entry.is_dir() and not entry.is_symlink():
                    walk(entry)  # the writer's folder: a user's file inside it goes back too
                continue
            place = target / relative
            if place.exists() or place.is_symlink():
                continue
            place.parent.mkdir(parents=True, exist_ok=True)
            os.replace(entry, place)
            moved.append(relative)

    walk(old)
    shutil.rmtree(old, ignore_errors=True)
    return moved


def finish_swaps(target: Path) -> list[str]:
    """Finish the swaps of `target` that a kill interrupted (`.NAME.old-PID` beside it, its process gone): where the
    new folder never arrived, the old one is put back; where it did, what was not the old folder's writer's is moved
    back into it and the old one removed. Each is said in one line; returns those lines."""
    target = Path(target)
    done = []
    if not target.parent.is_dir():
        return done
    for path in sorted(target.parent.iterdir()):
        match = LEFTOVER.match(path.name)
        if match is None or not match["old"] or match["target"] != target.name or not path.is_dir():
            continue
        if process_alive(int(match["old"].split("-")[1])):
            continue  # a live process is between its two renames
        if not target.exists() and not target.is_symlink():
            os.replace(path, target)
            done.append(f"{target}: put back as it was before a write that was killed mid-swap")
        elif target.is_dir():
            moved = keep_others(path, target)
            done.append(f"{target}: finished a swap that was killed"
                        + (f"; moved back into it: {', '.join(moved)}" if moved else ""))
    for line in done:
        get_logger(__name__).info(line)
    return done


def recover(parent: str | Path) -> list[str]:
    """Put right what killed writes left in `parent`: a folder swapped out whose replacement never arrived is put
    back; staging folders, swapped-out folders and temporary files are removed. Returns one line per thing done."""
    parent = Path(parent)
    done = []
    for path in sorted(parent.iterdir()):
        match = LEFTOVER.match(path.name)
        if match is None:
            continue
        target = parent / match["target"]
        if match["old"] and not target.exists():
            os.replace(path, target)
            done.append(f"restored {target.name} (a swap was interrupted)")
        elif match["old"] and target.is_dir() and path.is_dir():  # swapped: what was not its writer's goes back
            moved = keep_others(path, target)
            done.append(f"removed {path.name} (a swap was interrupted)"
                        + (f"; moved back into {target.name}: {', '.join(moved)}" if moved else ""))
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            done.append(f"removed {path.name} (left by an interrupted write)")
        else:
            path.unlink()
            done.append(f"removed {path.name} (left by an interrupted write)")
    return done
