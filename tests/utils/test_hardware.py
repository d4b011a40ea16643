"""`fast_bf16` follows the kernels torch dispatches to, not only the CPU's flags; `measure` times a block and, when
asked, its peak memory."""

import torch

from longbert.utils import hardware
from longbert.utils.hardware import fast_bf16, measure, resolve_precision


def test_bf16_is_not_fast_where_torch_runs_avx2_kernels(monkeypatch):
    # A CPU with AVX512-BF16 whose AVX-512 kernels are masked (ATEN_CPU_CAPABILITY=avx2) runs bf16 emulated:
    # `auto` must then be fp32, as on a CPU that is AVX2 only.
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert not fast_bf16("cpu")
    assert resolve_precision("auto", "cpu") == "no"
    assert resolve_precision("bf16", "cpu") == "bf16"  # an explicit choice passes through


def test_bf16_is_fast_where_torch_runs_avx512_kernels_on_a_bf16_cpu(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert fast_bf16("cpu")
    assert resolve_precision("auto", "cpu") == "bf16"


def test_avx512_without_bf16_units_is_not_fast(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert not fast_bf16("cpu")


def test_measure_on_the_cpu_releases_freed_memory_only_when_memory_is_measured(monkeypatch):
    released = []
    monkeypatch.setattr(hardware, "release_freed_memory", lambda: released.append(1))
    with measure("cpu") as cost:
        block = torch.ones(1 << 20)
    assert released == [1] and cost["memory_kind"].startswith("process_peak_rss") and cost["seconds"] >= 0
    with measure("cpu", memory=False) as timed:
        block += 1
    assert released == [1], "a timed-only block runs no garbage collection"
    assert timed["seconds"] >= 0 and timed["peak_memory_mb"] is timed["added_memory_mb"] is timed["memory_kind"] is None
