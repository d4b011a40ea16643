"""Atomic writes: unique temporary names, FIFOs, devices and symlinks written as meant, unwritable places and full
disks named in one line before or while writing, SIGTERM cleaned up like Ctrl-C, leftovers of killed writers swept,
and files readable by others as the umask says."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from safetensors import SafetensorError

from longbert.errors import LongbertError
from longbert.utils.atomic import atomic_stream, guarded_stdout, write_text_atomically
from longbert.utils.destinations import writable_destination, writable_folder
from longbert.utils.outputs import atomic_folder, finish_swaps, recover, replaceable_folder


def test_two_writers_of_one_file_never_share_a_temporary_file(tmp_path):
    out = tmp_path / "out.jsonl"
    with atomic_stream(out) as first, atomic_stream(out) as second:
        for i in range(100):
            first.write(f"first {i}\n")
            second.write(f"second {i}\n")
        assert len(list(tmp_path.glob(".out.jsonl.tmp-*"))) == 2
    # The outer block finishes last: its file wins whole; nothing is interleaved or padded.
    assert out.read_text() == "".join(f"first {i}\n" for i in range(100))
    assert list(tmp_path.iterdir()) == [out]


def test_a_fifo_is_written_through_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    write_text_atomically(fifo, "hello\n")
    reader.join(timeout=10)
    assert received == ["hello\n"]
    assert fifo.is_fifo()


def test_a_symlink_is_followed_and_kept(tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    with atomic_stream(link) as stream:
        stream.write("new\n")
    assert link.is_symlink() and target.read_text() == "new\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_device_is_one_error_line_and_stays_a_device():
    with pytest.raises(LongbertError, match="could not write /dev/full: the disk is full"):
        with atomic_stream("/dev/full") as stream:
            for _ in range(100):
                stream.write("x" * 65536)
    assert Path("/dev/full").is_char_device()


def test_unwritable_places_are_refused_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(LongbertError, match="cannot write output /proc/"):
        writable_destination("/proc/x.jsonl")
    with pytest.raises(LongbertError, match="is a folder"):
        writable_destination(tmp_path)
    with pytest.raises(LongbertError, match="exists and is not a folder"):
        writable_folder(tmp_path / "file")
    with pytest.raises(LongbertError, match="cannot write"):
        writable_folder(tmp_path / "file" / "below")
    with pytest.raises(LongbertError, match="the folder .*new does not exist"):  # a missing folder is not made
        writable_destination(tmp_path / "new" / "out.jsonl")
    assert not (tmp_path / "new").exists()
    made = writable_destination(tmp_path / "new" / "out.jsonl", make_folder=True)  # --explain's folder: made
    assert made == tmp_path / "new" / "out.jsonl" and list((tmp_path / "new").iterdir()) == []  # the probe is gone


def test_sigterm_while_streaming_leaves_neither_output_nor_temporary_file(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal
        from longbert.utils.atomic import atomic_stream
        with atomic_stream({str(tmp_path / 'out.jsonl')!r}) as stream:
            stream.write("a row\\n")
            os.kill(os.getpid(), signal.SIGTERM)
            stream.write("never\\n")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert list(tmp_path.iterdir()) == []


def test_leftovers_of_killed_writers_are_swept_and_a_live_writers_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (tmp_path / f".out.jsonl.tmp-{dead}-abc").write_text("partial")
    (tmp_path / f".out.jsonl.tmp-{os.getpid()}-live").write_text("mine, still writing")
    (tmp_path / f".export.staging-{dead}-xyz").mkdir()
    write_text_atomically(tmp_path / "out.jsonl", "done\n")
    with atomic_folder(tmp_path / "export") as staging:
        (staging / "a.txt").write_text("a")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f".out.jsonl.tmp-{os.getpid()}-live", "export", "out.jsonl"]
    assert recover(tmp_path) == [f"removed .out.jsonl.tmp-{os.getpid()}-live (left by an interrupted write)"]


def test_files_get_the_mode_the_umask_implies(tmp_path):
    import torch
    from safetensors.torch import save_file

    previous = os.umask(0o022)
    try:
        with atomic_folder(tmp_path / "model") as staging:
            save_file({"w": torch.zeros(2)}, staging / "head.safetensors")
        write_text_atomically(tmp_path / "metrics.json", "{}")
    finally:
        os.umask(previous)
    assert (tmp_path / "model" / "head.safetensors").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "model").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "metrics.json").stat().st_mode & 0o777 == 0o644


def test_signal_handler_is_restored_after_a_stream(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with atomic_stream(tmp_path / "x") as stream:
        stream.write("x")
    assert signal.getsignal(signal.SIGTERM) is before


def _folder_with(tmp_path, text: str) -> Path:
    target = tmp_path / "model"
    with atomic_folder(target) as staging:
        (staging / "weights.txt").write_text(text)
    return target


def _assert_left_as_it_was(target: Path) -> None:
    assert (target / "weights.txt").read_text() == "older", "the older folder is intact"
    assert sorted(p.name for p in target.parent.iterdir()) == ["model"], "no staging folder is left"


@pytest.mark.parametrize("failure", [
    OSError(errno.ENOSPC, "No space left on device"),
    # what safetensors (0.8) raises on a full disk, and the form older versions gave
    SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
    SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on '
                    'device" })'),
], ids=["oserror", "safetensors", "safetensors-old"])
def test_a_full_disk_while_a_folder_is_written_is_one_line_and_leaves_the_older_folder(tmp_path, monkeypatch,
                                                                                       failure):
    import safetensors.torch
    import torch

    target = _folder_with(tmp_path, "older")

    def full(*args, **kwargs):
        raise failure

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(LongbertError) as caught:
        with atomic_folder(target) as staging:
            (staging / "config.json").write_text("{}")
            safetensors.torch.save_file({"w": torch.zeros(2)}, str(staging / "model.safetensors"))
    assert str(caught.value) == f"could not write {target}: the disk is full"
    _assert_left_as_it_was(target)


def test_a_failed_swap_is_one_line_and_puts_the_older_folder_back(tmp_path, monkeypatch):
    target = _folder_with(tmp_path, "older")
    replace = os.replace

    def read_only_after_the_first_rename(source, destination):
        if Path(source).name.startswith(".model.staging-"):
            raise OSError(errno.EROFS, "Read-only file system")
        replace(source, destination)

    monkeypatch.setattr(os, "replace", read_only_after_the_first_rename)
    with pytest.raises(LongbertError, match=f"^could not write {target}: Read-only file system$"):
        with atomic_folder(target, "weights.txt") as staging:  # an earlier output of its kind: replaceable
            (staging / "weights.txt").write_text("newer")
    _assert_left_as_it_was(target)


@pytest.mark.parametrize("failure", [ValueError("a bug"), KeyboardInterrupt(), SafetensorError("not a tensor")])
def test_other_errors_in_a_folder_write_pass_through_unchanged(tmp_path, failure):
    target = _folder_with(tmp_path, "older")
    with pytest.raises(type(failure)) as caught:
        with atomic_folder(target) as staging:
            (staging / "weights.txt").write_text("newer")
            raise failure
    assert caught.value is failure
    _assert_left_as_it_was(target)


def test_a_folder_of_other_files_is_refused_and_kept_an_earlier_output_replaced(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(LongbertError, match=r"^--output .*mine already holds files this command did not write "
                                            r"\(it has no out.json\); name a new or empty folder$"):
        with atomic_folder(foreign, "out.json", "--output") as staging:
            (staging / "out.json").write_text("{}")
    assert [p.name for p in tmp_path.iterdir()] == ["mine"] and (foreign / "notes.txt").read_text() == "mine"
    # empty, absent, or written before by the same kind of write (its marker): what it wrote is replaced; a folder
    # from before the list of what was written keeps every entry the new write does not hold
    for target in (tmp_path / "empty", tmp_path / "absent", tmp_path / "earlier"):
        if target.name == "empty":
            target.mkdir()
        if target.name == "earlier":
            target.mkdir()
            (target / "out.json").write_text("older")
            (target / "stale.txt").write_text("older")
        with atomic_folder(target, "out.json") as staging:
            (staging / "out.json").write_text("newer")
        kept = ["stale.txt"] if target.name == "earlier" else []
        assert sorted(p.name for p in target.iterdir()) == [".longbert-written", "out.json", *kept]
        assert (target / "out.json").read_text() == "newer"


def test_a_replacement_removes_only_what_the_earlier_write_wrote_and_keeps_a_users_files(tmp_path):
    """`longbert ensemble ... --output ens` again over an ensemble beside which the user wrote notes, made a hybrid
    and evaluated: only the ensemble's own earlier files go."""
    target = tmp_path / "ens"
    with atomic_folder(target, "summary.json") as staging:
        for name in ("summary.json", "predictions-test.jsonl"):
            (staging / name).write_text("first")
        (staging / "best").mkdir()
        (staging / "best" / "weights").write_text("first")
    (target / "notes.txt").write_text("mine")
    (target / "hybrid").mkdir()
    (target / "hybrid" / "hybrid.json").write_text("{}")
    with atomic_folder(target, "summary.json") as staging:  # the second write has no test predictions
        (staging / "summary.json").write_text("second")
        (staging / "best").mkdir()
        (staging / "best" / "weights").write_text("second")
    assert sorted(p.name for p in target.iterdir()) == [".longbert-written", "best", "hybrid", "notes.txt",
                                                        "summary.json"]
    assert (target / "best" / "weights").read_text() == "second" and (target / "notes.txt").read_text() == "mine"
    assert (target / "hybrid" / "hybrid.json").is_file() and [p.name for p in tmp_path.iterdir()] == ["ens"]


def test_a_folder_that_appears_with_files_during_the_write_is_refused_not_replaced(tmp_path):
    """`longbert export r --output xr & mkdir xr; echo keep > xr/mine.txt`: checked at the start and again at the
    swap; the user's folder stays as it is and nothing is left beside it."""
    target = tmp_path / "xr"
    with pytest.raises(LongbertError, match=r"^--output .*xr appeared or changed while this command ran and holds "
                                            "files it did not write; nothing was replaced: name a new folder$"):
        with atomic_folder(target, None, "--output") as staging:
            (staging / "model.onnx").write_text("exported")
            target.mkdir()
            (target / "mine.txt").write_text("keep")
    assert [p.name for p in target.iterdir()] == ["mine.txt"] and [p.name for p in tmp_path.iterdir()] == ["xr"]


def test_recover_moves_a_users_files_back_from_a_swap_killed_after_its_renames(tmp_path):
    target, old = tmp_path / "ens", tmp_path / ".ens.old-999999"
    for folder, names in ((target, ["summary.json"]), (old, ["summary.json", "notes.txt"])):
        folder.mkdir()
        for name in names:
            (folder / name).write_text(folder.name)
    (old / ".longbert-written").write_text('["summary.json"]')
    assert recover(tmp_path) == [f"removed {old.name} (a swap was interrupted); moved back into ens: notes.txt"]
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt", "summary.json"] and not old.exists()


@pytest.mark.parametrize("name", ["", ".", "..", "sub/.."])
def test_a_path_that_names_no_folder_is_one_line(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LongbertError, match=f"^--output {re.escape(repr(name))} names no folder of its own; name a "
                                            "new folder to write$"):
        replaceable_folder(name, "out.json", "--output")
    with pytest.raises(LongbertError, match="names no folder of its own"):
        with atomic_folder(name):
            pass
    assert list(tmp_path.iterdir()) == []


def test_stdout_on_a_full_disk_is_one_line_and_another_error_leaves_stdout_as_it_was(tmp_path, monkeypatch):
    full_disk = "^could not write stdout: the disk is full$"
    with open("/dev/full", "w") as full, pytest.raises(LongbertError, match=full_disk):
        monkeypatch.setattr("sys.stdout", full)
        with guarded_stdout():
            print("a row")  # buffered: the failure comes with the flush at the end of the block
    with open(tmp_path / "out.txt", "w") as out, pytest.raises(LongbertError, match="^a user error$"):
        monkeypatch.setattr("sys.stdout", out)
        with guarded_stdout():
            print("before the error")
            raise LongbertError("a user error")
    assert (tmp_path / "out.txt").read_text() == "before the error\n", "nothing dropped: stdout did not fail"


def test_json_refuses_a_number_that_is_not_finite_and_names_where_it_is(tmp_path):
    from longbert.errors import LongbertError
    from longbert.utils.atomic import json_text, write_json

    target = tmp_path / "metrics.json"
    with pytest.raises(LongbertError, match=r"metrics.json: test.by_length\[1\] is nan, not a finite number"):
        write_json(target, {"test": {"by_length": [0.5, float("nan")]}})
    assert not target.exists() and list(tmp_path.iterdir()) == []  # nothing written, no temporary file left
    with pytest.raises(LongbertError, match="row 3: probabilities.pos is inf"):
        json_text({"probabilities": {"neg": 0.0, "pos": float("inf")}}, "row 3")
    assert json_text({"a": [1.5, None]}, "x") == '{"a": [1.5, null]}'


def test_a_run_that_is_only_read_may_be_read_only_and_shares_its_lock_with_other_readers(tmp_path):
    """An ensemble's members and a hybrid's base are only read: a read-only run is one (once refused as unwritable),
    two readers share it, and a training that holds it keeps readers out in one line without the advice to set
    another output_dir, which they have no option for."""
    import stat

    from longbert.utils.destinations import locked

    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text("x")
    run.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with locked(run, reading=True), locked(run, reading=True):
            assert (run / "recipe.yaml").read_text() == "x"
    finally:
        run.chmod(stat.S_IRWXU)
    with locked(run):  # a training writes it
        with pytest.raises(LongbertError, match=r"^run folder .*run is being written by another longbert process") as e:
            with locked(run, reading=True):
                pass
    assert "output_dir" not in str(e.value) and sorted(p.name for p in run.iterdir()) == ["recipe.yaml"]


def test_an_output_named_through_a_link_is_written_where_it_points_and_the_link_stays(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    with atomic_folder(real, "out.json") as staging:
        (staging / "out.json").write_text("first")
    (real / "mine.txt").write_text("keep")
    link.symlink_to(real)
    with atomic_folder(link, "out.json") as staging:
        (staging / "out.json").write_text("second")
    assert link.is_symlink() and (real / "out.json").read_text() == "second" and (real / "mine.txt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]  # no .link.old-PID left


def test_a_swap_killed_between_its_renames_is_finished_by_the_next_write_and_said(tmp_path, capfd):
    """kill -9 after the first rename: the old folder (with the user's notes) lies aside as .ens.old-PID and ens is
    gone. The next write of ens puts it back first, then replaces only its writer's files; the notes stay."""
    target = tmp_path / "ens"
    with atomic_folder(target, "summary.json") as staging:
        (staging / "summary.json").write_text("first")
    (target / "notes.txt").write_text("mine")
    aside = tmp_path / ".ens.old-999999"  # no such process
    target.rename(aside)
    with atomic_folder(target, "summary.json") as staging:
        (staging / "summary.json").write_text("second")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ens"], "nothing left hidden"
    assert (target / "notes.txt").read_text() == "mine" and (target / "summary.json").read_text() == "second"
    assert f"{target}: put back as it was before a write that was killed mid-swap" in capfd.readouterr().err
    # killed after both renames: the new folder is in place and the old one aside; a reader finishes it too
    (target / "notes.txt").rename(tmp_path / "notes.txt")
    aside.mkdir()
    (aside / ".longbert-written").write_text('{"paths": ["summary.json"]}')
    (aside / "summary.json").write_text("first")
    (tmp_path / "notes.txt").rename(aside / "notes.txt")
    assert finish_swaps(target) == [f"{target}: finished a swap that was killed; moved back into it: notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ens"] and (target / "notes.txt").read_text() == "mine"


def test_a_users_file_inside_a_written_subfolder_survives_a_replacement(tmp_path):
    target = tmp_path / "ens"
    with atomic_folder(target, "summary.json") as staging:
        (staging / "summary.json").write_text("first")
        (staging / "best").mkdir()
        (staging / "best" / "head.safetensors").write_text("first")
        (staging / "best" / "old-only.json").write_text("first")
    assert json.loads((target / ".longbert-written").read_text()) == {
        "paths": ["best", "best/head.safetensors", "best/old-only.json", "summary.json"]}
    (target / "best" / "mynote.txt").write_text("mine")
    (target / "best" / "mine").mkdir()
    (target / "best" / "mine" / "a.txt").write_text("mine")
    with atomic_folder(target, "summary.json") as staging:
        (staging / "summary.json").write_text("second")
        (staging / "best").mkdir()
        (staging / "best" / "head.safetensors").write_text("second")
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == [
        ".longbert-written", "best", "best/head.safetensors", "best/mine", "best/mine/a.txt", "best/mynote.txt",
        "summary.json"], "the writer's old-only file went; the user's, at any depth, stayed"
    assert (target / "best" / "head.safetensors").read_text() == "second"


@pytest.mark.parametrize("manifest", ["null", "[1, 2]", '{"paths": null}', "{not json"])
def test_a_damaged_list_of_what_was_written_is_refused_before_anything_moves(tmp_path, manifest):
    target = tmp_path / "ens"
    with atomic_folder(target, "summary.json") as staging:
        (staging / "summary.json").write_text("first")
    (target / "notes.txt").write_text("mine")
    (target / ".longbert-written").write_text(manifest)
    with pytest.raises(LongbertError, match=r"ens/\.longbert-written is damaged .*nothing was moved"):
        with atomic_folder(target, "summary.json") as staging:
            (staging / "summary.json").write_text("second")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ens"], "no staging or swapped-out folder left"
    assert (target / "summary.json").read_text() == "first" and (target / "notes.txt").read_text() == "mine"
