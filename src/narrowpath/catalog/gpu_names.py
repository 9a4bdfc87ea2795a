"""Descriptive GPU names → catalog devices: `B200-SXM-192GB`, `NVIDIA H100 80GB HBM3`, `gb200_nvl72_186gb`.

Published corpora name boards the way their sources do (shared/validation/README.md: "GPU names are descriptive …
resolve them to catalog devices"). The catalog lists each device's usual names as exact aliases; a name that is none
of them is read for what it states — the chip (family), the board's form factor and its memory — and matched to the
one device of that family whose memory agrees. Nothing is guessed: a PCIe or NVL (PCIe) board is not the SXM device
(other clocks, power and links), a chip the catalog lacks (H20, GH200, V100) is not a neighbour, and two devices left
(an unstated memory) are named, not chosen between.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

GIB = float(1 << 30)
MEMORY_TOLERANCE = 0.08
"""Stated memory vs a device's HBM capacity: marketing figures round, and vendors quote raw or usable sizes (B200:
180 and 192 GB for one 179 GiB board; B300: 270 and 288 GB; GB200: 186 and 192 GB) — within 8 %; H100's 80 and 96 GB
boards differ by 17 %."""

FAMILIES = ("RTX-PRO-6000", "GB300", "GB200", "GH200", "B300", "B200", "H800", "H200", "H100", "H20", "A800", "A100",
            "V100", "MI355X", "MI325X", "MI300X", "L40S")
"""Chip names, longest-overlapping first (GB200 before B200, H200 before H20)."""


@dataclass(frozen=True)
class GpuName:
    """What a descriptive name states: the chip, the form factor (sxm, pcie, nvl; None unstated), the memory in GB
    (None unstated) and the memory type (HBM2E, HBM3, HBM3E; None unstated)."""

    family: str | None
    form: str | None
    memory_gb: float | None
    memory_type: str | None


def normalized(name: str) -> str:
    """Upper case, words joined by single hyphens, a leading vendor dropped."""
    s = re.sub(r"[\s_/]+", "-", str(name).strip().upper())
    s = re.sub(r"-+", "-", s).strip("-")
    return re.sub(r"^(NVIDIA|AMD)-", "", s)


def parse_gpu_name(name: str) -> GpuName:
    """The chip, form factor, memory and memory type a descriptive name states (GpuName)."""
    s = normalized(name)
    family = next((f for f in FAMILIES if re.search(rf"(^|-){re.escape(f)}(?![0-9])", s)), None)
    rest = s.replace(family, " ", 1) if family else s
    memory = re.search(r"(?<![0-9.])(\d+(?:\.\d+)?)-?GB(?![A-Z0-9])", rest)
    mtype = re.search(r"HBM(2E|3E|3|2)", rest)
    if re.search(r"PCIE", rest):
        form = "pcie"
    elif re.search(r"(^|-)NVL(?![0-9])", rest):
        form = "nvl"  # H100 NVL / H200 NVL: PCIe cards bridged in pairs or fours
    elif re.search(r"SXM|HGX|DGX|NVL\d+|OAM", rest):
        form = "sxm"
    else:
        form = None
    return GpuName(family, form, float(memory.group(1)) if memory else None,
                   f"HBM{mtype.group(1)}" if mtype else None)


def _entry_names(eid: str, entry: Mapping[str, Any]) -> list[GpuName]:
    return [parse_gpu_name(n) for n in (eid, *(entry.get("aliases") or ()))]


def _memory_gib(entry: Mapping[str, Any]) -> float:
    for level in entry.get("levels") or ():
        if level.get("name") == "hbm":
            return float(level.get("capacity_bytes", 0.0)) / GIB
    return 0.0


def resolve_gpu_name(name: str, devices: Mapping[str, Mapping[str, Any]]) -> tuple[str | None, str]:
    """(catalog id, "") for the one device `name` describes, else (None, why not) in a few words."""
    want = parse_gpu_name(name)
    if want.family is None:
        return None, "names no GPU chip the catalog knows"
    same = {eid: e for eid, e in devices.items() if any(n.family == want.family for n in _entry_names(eid, e))}
    if not same:
        return None, f"the catalog has no {want.family} device"
    if want.form in ("pcie", "nvl"):
        forms = {eid for eid, e in same.items() if any(n.form == want.form for n in _entry_names(eid, e))}
        if not forms:
            return None, (f"the {want.family} {want.form.upper()} board is not the catalog's SXM/rack device (other "
                          "clocks, power and links): add a device entry for it")
        same = {eid: same[eid] for eid in forms}
    if want.memory_gb is not None:
        same = {eid: e for eid, e in same.items()
                if abs(_memory_gib(e) - want.memory_gb) <= MEMORY_TOLERANCE * max(_memory_gib(e), 1.0)}
        if not same:
            return None, f"no {want.family} device has {want.memory_gb:g} GB"
    typed = [eid for eid, e in same.items() if any(n.memory_type for n in _entry_names(eid, e))]
    if want.memory_type is not None:
        match = [eid for eid in typed if any(n.memory_type == want.memory_type for n in _entry_names(eid, devices[eid]))]
        same = {eid: same[eid] for eid in match} if match else {eid: e for eid, e in same.items() if eid not in typed}
    elif len(same) > 1:
        same = {eid: e for eid, e in same.items() if eid not in typed} or same
    if len(same) == 1:
        return next(iter(same)), ""
    if not same:
        return None, f"no {want.family} device has {want.memory_type} memory"
    return None, f"matches {', '.join(sorted(same))}: state the memory (e.g. 80GB)"
