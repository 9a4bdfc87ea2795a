"""Facility data of a system (catalog/facility.yaml): power of the rest of a node, of a scale-out switch, the
building's PUE and the storage system's bandwidth per GPU — each with its source.

Lookup, strictest first: the system's own entry (by exact system id), else its device's generation (the device
id listed exactly), else the labelled `generic` entry; `Facility.basis` says which one was used.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import Any, Mapping

from narrowpath.errors import CatalogError
from narrowpath.spec.strict_load import load_yaml
from narrowpath.spec.system import System

FILE = "facility.yaml"
FIELDS = ("node_non_gpu_w", "switch_w", "pue", "storage_write_bytes_per_s_per_gpu",
          "storage_read_bytes_per_s_per_gpu")


@dataclass(frozen=True, slots=True, kw_only=True)
class Facility:
    """What surrounds the GPUs of one system."""

    node_non_gpu_w: float
    """Power of one node besides its GPUs under training load (CPUs, memory, NICs, NVSwitches, fans, PSU loss), W."""
    switch_w: float
    """Power of one scale-out switch with its optics, W."""
    pue: float
    """Power usage effectiveness of the building: facility power / IT power (>= 1)."""
    storage_write_bytes_per_s_per_gpu: float
    """Checkpoint storage write bandwidth the cluster is provisioned with, per GPU, bytes/s."""
    storage_read_bytes_per_s_per_gpu: float
    """Checkpoint storage read bandwidth per GPU, bytes/s."""
    basis: str
    """Which entry it came from: `system <id>`, `generation <id>` or `generic`."""
    next_system: str = ""
    """Catalog system of the vendor's next device generation ('' = none in the catalog)."""
    sources: Mapping[str, str] = field(default_factory=dict)


def _check(where: str, entry: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k in FIELDS:
        v = entry.get(k)
        if isinstance(v, str):  # YAML 1.1 reads 1.22e8 (no sign in the exponent) as a string
            try:
                v = float(v)
            except ValueError:
                pass
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise CatalogError(f"{FILE}: {where}.{k} must be a positive number, got {v!r}")
        out[k] = float(v)
    if out["pue"] < 1.0:
        raise CatalogError(f"{FILE}: {where}.pue must be >= 1, got {out['pue']}")
    if not isinstance(entry.get("sources"), dict):
        raise CatalogError(f"{FILE}: {where} has no sources")
    return out


@lru_cache(maxsize=None)
def _table() -> tuple[dict[str, dict], dict[str, dict], dict]:
    data = load_yaml(resources.files("narrowpath.catalog").joinpath(FILE).read_text())
    systems, devices = {}, {}
    for e in data.get("systems", []):
        if e["id"] in systems:
            raise CatalogError(f"{FILE}: duplicate system {e['id']!r}")
        _check(f"systems[{e['id']}]", e)
        systems[e["id"]] = e
    for g in data.get("generations", []):
        _check(f"generations[{g['id']}]", g)
        for d in g.get("devices", []):
            if d in devices:
                raise CatalogError(f"{FILE}: device {d!r} is listed in two generations")
            devices[d] = g
    _check("generic", data["generic"])
    return systems, devices, data["generic"]


def facility_for(system: System) -> Facility:
    """The facility data of `system` (module docstring for the lookup order)."""
    systems, devices, generic = _table()
    if system.name in systems:
        entry, basis = systems[system.name], f"system {system.name}"
    elif system.device.name in devices:
        entry = devices[system.device.name]
        basis = f"generation {entry['id']}"
    else:
        entry, basis = generic, f"generic (no facility data for {system.name} / {system.device.name})"
    nxt = (devices[system.device.name].get("next_system") or {}).get(system.device.name, "") \
        if system.device.name in devices else ""
    return Facility(**_check(basis, entry), basis=basis, next_system=nxt,
                    sources=MappingProxyType(dict(entry["sources"])))
