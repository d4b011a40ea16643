"""Where a command will write, checked before any work is done: a file's destination (`writable_destination`) and a
folder that exists or can be made (`writable_folder` makes it; `folder_to_write` makes nothing), each down to writing
a probe file and removing it. A path that cannot be written is one LongbertError line naming it. A run folder is
held by one process at a time (`locked`)."""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from longbert.errors import LongbertError
from longbert.utils.atomic import live_writer

try:
    import fcntl  # POSIX only: on Windows a run folder is not locked
except ImportError:
    fcntl = None


def writable_destination(path: str | Path, what: str = "output", make_folder: bool = False) -> Path:
    """`path` where a file can be written, checked before any work is done: its symlink followed, and a probe file
    written in its folder. A missing folder is refused, whether named directly or through a symlink (a dangling one
    included), unless `make_folder`: then it is created (its own parent must exist). Raises one LongbertError line
    naming the path otherwise."""
    named = Path(path).expanduser()
    path = Path(os.path.realpath(named)) if named.is_symlink() else named
    if not path.parent.is_dir() and not (make_folder and path.parent.parent.is_dir()):
        through = f" (it links to {path})" if path != named else ""
        raise LongbertError(f"{what} {named}: the folder {path.parent} does not exist{through}")
    if path.exists() and path.is_dir():
        raise LongbertError(f"{what} {path} is a folder, not a file")
    writer = live_writer(path)
    if writer is not None:  # two writers of one file: the later rename would silently replace the other's rows
        raise LongbertError(f"{what} {named} is being written by another process (pid {writer}); wait for it to "
                            "finish or name another file")
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        if not os.access(path, os.W_OK):
            raise LongbertError(f"{what} {path} is not writable")
        return path
    _probe(path.parent, f".{path.name}.tmp-{os.getpid()}-", f"cannot write {what} {path}", make=False)
    return path


def writable_folder(path: str | Path, what: str = "output folder") -> Path:
    """A folder that can be created (or already exists) and written into, checked before any work is done."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise LongbertError(f"{what} {path} exists and is not a folder")
    _probe(path, ".probe-", f"cannot write into {what} {path}", make=True)
    return path


def _probe(folder: Path, prefix: str, failure: str, make: bool) -> None:
    """Make `folder` (with its parents when `make`, else itself only) and write and remove a probe file in it; an
    OSError is `failure`: why, in one LongbertError line. mkstemp makes the probe's name unique, so that it meets no
    other writer's file."""
    try:
        folder.mkdir(parents=make, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=prefix, dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise LongbertError(f"{failure}: {error.strerror or error}") from None


def folder_to_write(path: str | Path, what: str = "output folder") -> Path:
    """A folder that exists and can be written into (a probe file is written there and removed), or one that can be
    made: its nearest existing ancestor is a folder this process may write. Checked before any work, creating
    nothing, so that a command refused for one folder has not made another. One LongbertError line otherwise."""
    path = Path(path).expanduser()
    if path.exists() or path.is_symlink():
        return writable_folder(path, what)
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise LongbertError(f"cannot write into {what} {path}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise LongbertError(f"cannot write into {what} {path}: {existing} is not writable")
    return path


@contextmanager
def locked(run_dir: Path, what: str = "run folder", reading: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on the run folder while the block runs. The lock is an flock on the folder itself, so
    it leaves no file behind and goes with the process however it ends. Another process (or another `train` in this
    one) that asks for it meanwhile gets a LongbertError naming the folder. The folder is made, and once locked
    checked writable (`writable_folder`, whose probe file no other holder can meet): a path that cannot be a folder
    (a file, a place that cannot be written) is one LongbertError line naming it as `what`. A folder made here and
    still empty at the end (a run that failed before writing anything) is removed, with the parents made for it.
    Where the platform has no flock (Windows), the folder is not locked. `reading`: the block only reads the run (an
    ensemble's member, a hybrid's base): a shared lock, which a training's excludes and other readers share, on a
    folder that must exist and may be read-only."""
    if reading:
        yield from _read_lock(run_dir)
        return
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # what mkdir makes, deepest first
    created = bool(made)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        writable_folder(run_dir, what)  # says why in one line
        raise
    if fcntl is None:
        writable_folder(run_dir, what)
        yield
        return
    busy = LongbertError(f"run folder {run_dir} is in use by another longbert process; wait for it to end, or set "
                         "another output_dir (--set output_dir=...)")
    try:
        handle = os.open(run_dir, os.O_RDONLY)
    except FileNotFoundError:  # removed by the process that held it, as it ended
        raise busy from None
    held = False
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # The folder this lock is on must still be the one at that path (not removed as it was opened).
            held = os.path.samestat(os.fstat(handle), os.stat(run_dir))
        except (BlockingIOError, FileNotFoundError):
            pass
        if not held:
            raise busy
        writable_folder(run_dir, what)
        yield
    finally:
        if held and created and not any(run_dir.iterdir()):
            remove_empty(made)
        os.close(handle)  # releases the lock


def remove_empty(folders: list[Path]) -> None:
    """Remove `folders` (deepest first: a folder, then the parents made with it) while each is empty; stop at the
    first that holds anything, which another process may have put there meanwhile."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _read_lock(run_dir: Path) -> Iterator[None]:
    """`locked(reading=True)`'s body: a shared flock on an existing folder, nothing made, nothing checked writable."""
    if fcntl is None:
        yield
        return
    handle = os.open(run_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LongbertError(f"run folder {run_dir} is being written by another longbert process (a training or "
                                "an evaluation); wait for it to end, then run this again") from None
        yield
    finally:
        os.close(handle)  # releases the lock
