"""glibc's allocator as every command sets it: freed memory kept where there is glibc, nothing changed elsewhere; and
the heap handed back on request."""

import platform

from typer.testing import CliRunner

import longbert.commands
from longbert.cli import app
from longbert.utils import allocator


def test_freed_memory_is_kept_on_glibc_and_left_alone_elsewhere(monkeypatch):
    assert allocator.keep_freed_memory() is (platform.system() == "Linux" and platform.libc_ver()[0] == "glibc")
    monkeypatch.setattr(allocator.platform, "system", lambda: "Darwin")
    assert allocator.keep_freed_memory() is False


def test_every_command_keeps_freed_memory(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(longbert.commands, "keep_freed_memory", lambda: calls.append(1) or True)
    answer = CliRunner().invoke(app, ["quantize", str(tmp_path)])
    assert answer.exit_code == 2 and calls == [1]


def test_the_heap_is_trimmed_on_glibc_only(monkeypatch):
    assert allocator.trim_heap() is (platform.system() == "Linux" and platform.libc_ver()[0] == "glibc")
    monkeypatch.setattr(allocator, "_TRIM", None)  # no malloc_trim found (not glibc)
    assert allocator.trim_heap() is False
