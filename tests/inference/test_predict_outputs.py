"""Where `longbert predict` writes, under a hostile or unlucky user: an unwritable -o or --explain is one line before
the model loads, a page that cannot be written keeps the finished rows, a full disk is one line and a device stays a
device, and SIGTERM leaves neither the output nor its temporary file."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from helpers import build_model
from longbert.cli import app
from longbert.modeling.classifier import LongDocumentClassifier

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_dir(tiny_backbone_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("model") / "saved"
    build_model(tiny_backbone_dir, "chunk").save_pretrained(folder)
    return folder


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_unwritable_outputs_are_one_line_before_the_model_loads(tmp_path, monkeypatch):
    def no_loading(directory):
        raise AssertionError("the model was loaded before the outputs were checked")

    monkeypatch.setattr(LongDocumentClassifier, "from_pretrained", no_loading)
    (tmp_path / "in.txt").write_text("a text\n")
    predict = lambda *options: runner.invoke(app, ["predict", str(tmp_path), str(tmp_path / "in.txt"), *options])
    assert "cannot write --output /proc/x.jsonl" in one_error_line(predict("-o", "/proc/x.jsonl"))
    line = one_error_line(predict("-o", str(tmp_path / "out.jsonl"), "--explain", "/proc/x.html"))
    assert "cannot write --explain /proc/x.html" in line
    assert not (tmp_path / "out.jsonl").exists()


def test_a_page_that_cannot_be_written_keeps_the_rows(model_dir, tmp_path):
    (tmp_path / "in.txt").write_text("".join(f"text number {i}\n" for i in range(5)))
    (tmp_path / "page.html").symlink_to("/dev/full")  # passes every check, then fails as a full disk would
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["predict", str(model_dir), str(tmp_path / "in.txt"), "-o", str(out),
                                 "--explain", str(tmp_path / "page.html")])
    line = one_error_line(result)
    assert line.startswith("error: could not write ")  # the page, or the device it links to
    assert line.endswith(f": the disk is full; the rows were kept at {out}")
    assert len(out.read_text().splitlines()) == 5
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_full_disk_is_one_line_and_a_device_stays_a_device(model_dir, tmp_path):
    (tmp_path / "in.txt").write_text("a text\nanother\n")
    result = runner.invoke(app, ["predict", str(model_dir), str(tmp_path / "in.txt"), "-o", "/dev/full"])
    assert one_error_line(result) == "error: could not write /dev/full: the disk is full"
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_sigterm_leaves_neither_the_output_nor_a_temporary_file(model_dir, tmp_path):
    (tmp_path / "in.txt").write_text("".join(f"{'word ' * 40}number {i}\n" for i in range(4000)))
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "LONGBERT_PROGRESS": "0"}
    command = [sys.executable, "-m", "longbert.cli", "predict", str(model_dir), str(tmp_path / "in.txt"), "-o",
               str(out), "--batch-size", "1"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None:  # until the temporary file holds rows
            if any(t.read_text().count("\n") for t in tmp_path.glob(".out.jsonl.tmp*")):
                break
            time.sleep(0.02)
        assert process.poll() is None, "predict finished before it could be stopped: give it more texts"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + signal.SIGTERM, stderr  # SIGTERM's status, not Ctrl-C's 130
    assert "Traceback" not in stderr and stderr.strip().endswith("terminated")
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl*"))


def test_a_dangling_symlink_is_refused_as_a_missing_folder_is_and_creates_nothing(tmp_path, monkeypatch):
    def no_loading(directory):
        raise AssertionError("the model was loaded before the outputs were checked")

    monkeypatch.setattr(LongDocumentClassifier, "from_pretrained", no_loading)
    (tmp_path / "in.txt").write_text("a text\n")
    missing = tmp_path / "missing"
    (tmp_path / "out.jsonl").symlink_to(missing / "out.jsonl")
    (tmp_path / "page.html").symlink_to(missing / "page.html")
    predict = lambda *options: runner.invoke(app, ["predict", str(tmp_path), str(tmp_path / "in.txt"), *options])
    direct = one_error_line(predict("-o", str(missing / "out.jsonl")))
    through = one_error_line(predict("-o", str(tmp_path / "out.jsonl")))
    page = one_error_line(predict("--explain", str(tmp_path / "page.html")))
    assert direct.endswith(f"the folder {missing} does not exist")
    assert f"the folder {missing} does not exist (it links to {missing / 'out.jsonl'})" in through
    assert f"the folder {missing} does not exist (it links to {missing / 'page.html'})" in page
    assert not missing.exists()


def test_a_second_writer_of_the_same_output_is_refused_while_the_first_lives(tmp_path, monkeypatch):
    def no_loading(directory):
        raise AssertionError("the model was loaded before the outputs were checked")

    monkeypatch.setattr(LongDocumentClassifier, "from_pretrained", no_loading)
    (tmp_path / "in.txt").write_text("a text\n")
    (tmp_path / "out.jsonl").write_text("the first writer's earlier rows\n")
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # what a live `predict -o out.jsonl` leaves beside its output while it writes
        (tmp_path / f".out.jsonl.tmp-{first.pid}-abcd").write_text('{"id": 0}\n')
        line = one_error_line(runner.invoke(app, ["predict", str(tmp_path), str(tmp_path / "in.txt"), "-o",
                                                  str(tmp_path / "out.jsonl")]))
    finally:
        first.kill()
        first.wait()
    assert f"is being written by another process (pid {first.pid})" in line
    assert (tmp_path / "out.jsonl").read_text() == "the first writer's earlier rows\n"
    assert (tmp_path / f".out.jsonl.tmp-{first.pid}-abcd").exists()  # the live writer's file is not ours to remove
