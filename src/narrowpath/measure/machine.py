"""What the operating system reports about this machine: CPU name, cache sizes, memory, a peak estimate.

Cache sizes come from /sys/devices/system/cpu/cpu0/cache/index*/ (Linux), falling back to `lscpu -C`.
Under a hypervisor these are what the guest is told, which may exceed the share it really gets.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

_SYS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True, slots=True)
class OsCache:
    """One data (or unified) cache level as the OS reports it for one core."""

    name: str
    """`L1`, `L2`, `L3`…"""
    capacity_bytes: float
    """Size of one instance, bytes (an L3 instance is usually shared by many cores)."""
    source: str
    """Where the figure was read."""


def _size_bytes(text: str) -> float:
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMG]?)(i?B)?\s*", text.strip(), re.IGNORECASE)
    if not m:
        return 0.0
    return float(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2).upper()]


def os_caches(sys_dir: Path = _SYS_CACHE) -> list[OsCache]:
    """Data and unified caches of cpu0, nearest first; [] when the OS says nothing."""
    found: dict[int, OsCache] = {}
    for index in sorted(sys_dir.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _size_bytes((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size > 0:
            found[level] = OsCache(f"L{level}", size, str(index / "size"))
    if found:
        return [found[k] for k in sorted(found)]
    return _lscpu_caches()


def _lscpu_caches() -> list[OsCache]:
    try:
        out = subprocess.run(["lscpu", "-C", "--bytes"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    caches = {}
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("L1d", "L2", "L3", "L4") and parts[1].isdigit():
            level = int(parts[0][1])
            caches[level] = OsCache(f"L{level}", float(parts[1]), "lscpu -C")
    return [caches[k] for k in sorted(caches)]


def cuda_available() -> bool:
    """Whether PyTorch is installed and sees a GPU (the probes measure it then)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def under_hypervisor() -> bool:
    """True when the CPU flags say this is a virtual machine (the `hypervisor` CPUID bit)."""
    return bool(re.search(r"^flags\s*:.*\bhypervisor\b", _cpuinfo(), re.MULTILINE))


def physical_memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0.0


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_model_name() -> str:
    m = re.search(r"^model name\s*:\s*(.+)$", _cpuinfo(), re.MULTILINE)
    import platform
    return m.group(1).strip() if m else (platform.processor() or platform.machine())


def cpu_peak_flop_per_s(dtype: str) -> tuple[float, str]:
    """Estimated peak FLOP/s of all cores for `dtype`, with the reason; (0, reason) when unknown.

    peak = cores × clock × FLOP/cycle/core. FLOP/cycle assumes two FMA ports of the widest vector unit the CPU
    flags advertise (Intel optimization manual, 'Peak FLOPs' tables): AVX-512 64 FP32 / 32 FP64, AVX2+FMA 32 / 16;
    AMX-BF16 1024 BF16 FLOP/cycle (Intel AMX, 'TMUL' 16×32 BF16 dot products per cycle). The clock is the
    cpufreq maximum, else /proc/cpuinfo `cpu MHz` (a VM may report the base clock, so turbo makes the
    estimate low; efficiencies above 1 are then clipped by the caller).
    """
    info = _cpuinfo()
    flags = set((re.search(r"^flags\s*:\s*(.+)$", info, re.MULTILINE) or [None, ""])[1].split())
    hz = 0.0
    try:
        hz = float(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) * 1e3
        clock_src = "cpufreq max"
    except (OSError, ValueError):
        m = re.search(r"^cpu MHz\s*:\s*([\d.]+)", info, re.MULTILINE)
        hz, clock_src = (float(m.group(1)) * 1e6, "/proc/cpuinfo cpu MHz") if m else (0.0, "")
    cores = os.cpu_count() or 1
    if hz <= 0:
        return 0.0, "CPU clock unknown"
    if dtype in ("bf16",) and "amx_bf16" in flags:
        per, unit = 1024.0, "AMX-BF16"
    elif dtype in ("fp32", "fp64", "bf16", "fp16"):
        wide = 64.0 if "avx512f" in flags else 32.0 if ("avx2" in flags and "fma" in flags) else 8.0
        unit = "AVX-512" if wide == 64 else "AVX2+FMA" if wide == 32 else "SSE"
        per = wide / 2 if dtype == "fp64" else wide
        if dtype in ("bf16", "fp16"):
            unit += " (no matrix unit: same as FP32)"
    else:
        return 0.0, f"no peak estimate for {dtype} on CPU"
    reason = f"{cores} cores x {hz / 1e9:.2f} GHz ({clock_src}) x {per:g} FLOP/cycle ({unit}, 2 FMA ports)"
    return cores * hz * per, reason
