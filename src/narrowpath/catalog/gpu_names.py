"""Descriptive GPU names → catalog devices: `B200-SXM-192GB`, `NVIDIA H100 80GB HBM3`, `gb200_nvl72_186gb`.

Published corpora name boards the way their sources do (shared/validation/README.md: "GPU names are descriptive …
resolve them to catalog devices"). The catalog lists each device's usual names as exact aliases; a name that is none
of them is read for what it states — the chip (family), the board's form factor, its memory and memory type — and
matched to the one device of that chip whose own names and capacity state the same. Nothing is guessed: a PCIe, NVL
(PCIe) or workstation board is not the SXM/server device (other clocks, power and links) and matches only a device
whose own names state that form, while a name that states no form is the SXM/server board where the catalog has one;
a chip the catalog lacks (B200A, MI250X, A10G) is not a neighbour, a memory size or type no device of the chip has is
refused, and two devices left (an unstated memory) are named, not chosen between.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

GIB = float(1 << 30)
SIZE_SLACK_GB = 1.0
"""A stated memory matches a device when it is within 1 GB of a size the device is known by: a number in its id or
aliases (B200-SXM-180GB; GB200-192GB), its HBM capacity in GiB (179 for B200) or in decimal GB (192). Vendors quote
raw and usable sizes, so the catalog lists those it has sources for; H100 NVL's 94 GB is not the 96 GB board's."""

FAMILIES = ("RTX-PRO-6000", "GB300", "GB200", "GH200", "B300", "B200", "H800", "H200", "H100", "H20", "A800", "A100",
            "V100", "MI355X", "MI325X", "MI300X", "L40S")
"""Chip names, longest-overlapping first (GB200 before B200, H200 before H20); a chip name followed by another
letter or digit is another chip (B200A, RTX PRO 6000D)."""

REFUSED_FORMS = ("pcie", "nvl", "workstation")
"""Form factors that are other boards than the catalog's SXM/server devices of the same chip."""


@dataclass(frozen=True)
class GpuName:
    """What a descriptive name states: the chip, the form factor (sxm, pcie, nvl, workstation; None unstated), the
    memory in GB, the memory type (HBM2, HBM2E, HBM3, HBM3E) and an NVLink domain size (NVL72 → 72), each None when
    unstated."""

    family: str | None
    form: str | None
    memory_gb: float | None
    memory_type: str | None
    nvl_domain: int | None = None


def normalized(name: str) -> str:
    """Upper case, words joined by single hyphens, a leading vendor dropped."""
    s = re.sub(r"[\s_/]+", "-", str(name).strip().upper())
    s = re.sub(r"-+", "-", s).strip("-")
    return re.sub(r"^(NVIDIA|AMD)-", "", s)


def parse_gpu_name(name: str) -> GpuName:
    """The chip, form factor, memory, memory type and NVLink domain a descriptive name states (GpuName)."""
    s = normalized(name)
    family = next((f for f in FAMILIES if re.search(rf"(^|-){re.escape(f)}(?![0-9A-Z])", s)), None)
    rest = s.replace(family, " ", 1) if family else s
    memory = re.search(r"(?<![0-9.])(\d+(?:\.\d+)?)-?GB(?![A-Z0-9])", rest)
    mtype = re.search(r"HBM(2E|3E|3|2)(?![0-9A-Z])", rest)
    domain = re.search(r"NVL(\d+)(?![0-9A-Z])", rest)
    if re.search(r"PCIE", rest):
        form = "pcie"
    elif re.search(r"(^|-)NVL(?![0-9A-Z])", rest):
        form = "nvl"  # H100 NVL / H200 NVL: PCIe cards bridged in pairs or fours
    elif re.search(r"WORKSTATION|MAX-Q", rest):
        form = "workstation"
    elif re.search(r"SXM|HGX|DGX|NVL\d+|OAM", rest):
        form = "sxm"
    else:
        form = None
    return GpuName(family, form, float(memory.group(1)) if memory else None,
                   f"HBM{mtype.group(1)}" if mtype else None, int(domain.group(1)) if domain else None)


def _entry_names(eid: str, entry: Mapping[str, Any]) -> list[GpuName]:
    return [parse_gpu_name(n) for n in (eid, *(entry.get("aliases") or ()))]


def known_sizes_gb(eid: str, entry: Mapping[str, Any]) -> set[float]:
    """The memory sizes a device is known by: the GB figures of its id and aliases, and its HBM capacity in GiB
    and in decimal GB."""
    sizes = {n.memory_gb for n in _entry_names(eid, entry) if n.memory_gb is not None}
    for level in entry.get("levels") or ():
        if level.get("name") == "hbm":
            cap = float(level.get("capacity_bytes", 0.0))
            sizes |= {round(cap / GIB), round(cap / 1e9)}
    return sizes


def _server_boards(devices: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The devices none of whose names states a PCIe, NVL or workstation form."""
    return {eid: e for eid, e in devices.items() if not any(n.form in REFUSED_FORMS for n in _entry_names(eid, e))}


def resolve_gpu_name(name: str, devices: Mapping[str, Mapping[str, Any]]) -> tuple[str | None, str]:
    """(catalog id, "") for the one device `name` describes, else (None, why not) in a few words."""
    want = parse_gpu_name(name)
    if want.family is None:
        return None, "names no GPU chip the catalog knows"
    same = {eid: e for eid, e in devices.items() if any(n.family == want.family for n in _entry_names(eid, e))}
    if not same:
        return None, f"the catalog has no {want.family} device"
    if want.form in REFUSED_FORMS:
        forms = {eid for eid, e in same.items() if any(n.form == want.form for n in _entry_names(eid, e))}
        if not forms:
            return None, (f"the {want.family} {want.form.upper()} board is not the catalog's SXM/server device "
                          "(other clocks, power and links): add a device entry for it")
        same = {eid: same[eid] for eid in forms}
    elif want.form == "sxm":  # an SXM/server name is never a PCIe, NVL or workstation board
        same = _server_boards(same)
        if not same:
            return None, f"the catalog has no SXM/server {want.family} device"
    if want.memory_gb is not None:
        same = {eid: e for eid, e in same.items()
                if any(abs(size - want.memory_gb) <= SIZE_SLACK_GB for size in known_sizes_gb(eid, e))}
        if not same:
            return None, f"no {want.family} device has {want.memory_gb:g} GB"
    if want.memory_type is not None:
        same = {eid: e for eid, e in same.items()
                if any(n.memory_type == want.memory_type for n in _entry_names(eid, e))}
        if not same:
            return None, f"no {want.family} device has {want.memory_type} memory (the catalog's names say which)"
    if len(same) > 1 and want.form is None:  # an unstated form is the SXM/server board (the others name theirs)
        same = _server_boards(same) or same
    if len(same) > 1 and want.memory_type is None:  # an unstated type: the board whose id names none (a variant's
        plain = {eid: e for eid, e in same.items() if parse_gpu_name(eid).memory_type is None}  # id says its memory)
        same = plain or same
    if len(same) == 1:
        return next(iter(same)), ""
    return None, f"matches {', '.join(sorted(same))}: state the memory (e.g. 80GB)"

