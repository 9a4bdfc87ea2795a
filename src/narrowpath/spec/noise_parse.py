"""Grammar of `--noise` (and of a noise YAML file): turn `name=value` items into a `NoiseSpec`.

    SPEC  := ITEM ("," ITEM)*              several --noise flags concatenate
    ITEM  := NAME "=" FIELD (":" FIELD)*
    jitter=DIST:CV[:ALPHA]                 per-kernel noise; DIST normal | lognormal | pareto (ALPHA: tail index)
    slow-node=IDS:FRACTION                 node(s) compute (1 + FRACTION)× slower; IDS = 3 or 3+17 (0-based)
    slow-gpu=IDS:FRACTION                  the same for ranks
    slow-link=TIER:FRACTION[:RANK]         the link of RANK (default 0) on scale_up | scale_out is slower
    link-flap=TIER:PROB[:PENALTY]          each link of TIER flaps with PROB per step; a flap stalls PENALTY
    gc|data-loader|checkpoint-io|interference=PERIOD:PAUSE[:aligned|random]
    fail=CLASS:MTBF | fail=llama3          CLASS gpu | node | link | switch | software; MTBF per component
    detect=T  restart=T  checkpoint-every=T  horizon=T  maintenance=T  storage=BYTES_PER_S
Times take a unit suffix (us, ms, s, min, h, d; seconds by default, hours for MTBF). A YAML file is a mapping of
the same names to the same values (a quoted string — YAML 1.1 reads an unquoted 2:0.5 as the base-60 number
120.5 —, a number for the one-value items, or a list for repeated items), or to a mapping of the item's fields
by name (`jitter: {dist: lognormal, cv: 0.05}`).
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from narrowpath.errors import SpecError
from narrowpath.spec.noise import (FAILURE_CLASSES, INTERFERENCE_NAMES, Failures, Interference, Jitter, LinkFlap,
                                   NoiseSpec, SlowLink, SlowRanks)

_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_FIELDS = {"jitter": ("dist", "cv", "alpha"), "slow-node": ("ids", "fraction"), "slow-gpu": ("ids", "fraction"),
           "slow-link": ("tier", "fraction", "rank"), "link-flap": ("tier", "prob", "penalty"),
           "fail": ("class", "mtbf"), **{n: ("period", "pause", "phase") for n in INTERFERENCE_NAMES}}
_SCALARS = ("detect", "restart", "checkpoint-every", "horizon", "maintenance", "storage")
NAMES = tuple(_FIELDS) + _SCALARS

LLAMA3_HOURS = 54 * 24
LLAMA3_GPUS, LLAMA3_NODES = 16384, 2048
LLAMA3_COUNTS = {"gpu": 268, "node": 46, "link": 42, "software": 63}
"""Unexpected interruptions of Llama 3 405B's 54-day pre-training snapshot by our component class (Dubey et al.
2024, Table 5; 419 in all): gpu = faulty GPU 148 + HBM3 72 + SRAM 19 + GPU system processor 17 + silent data
corruption 6 + thermal interface/sensor 6; node = unplanned host maintenance 32 + SSD 3 + power supply 3 + chassis
2 + IO expansion board 2 + CPU 2 + system memory 2; link = network switch/cable 35 + NIC 7; software = software
bug 54 + dependency 2 + NCCL watchdog timeouts of unknown cause 7. 47 more interruptions were planned."""
LLAMA3_PLANNED = 47


def llama3_mtbf_h() -> tuple[tuple[str, float], ...]:
    """Per-component MTBF (hours) that reproduces Table 5's counts on 16,384 GPUs in 2,048 servers over 54 days."""
    population = {"gpu": LLAMA3_GPUS, "node": LLAMA3_NODES, "link": LLAMA3_GPUS, "software": LLAMA3_GPUS}
    return tuple((c, population[c] * LLAMA3_HOURS / n) for c, n in LLAMA3_COUNTS.items())


def parse_time_s(field: str, text: Any, default_unit: str = "s") -> float:
    """`30`, `30s`, `250ms`, `2.5h`, `54d` → seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text) * _TIME_UNITS[default_unit]
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(us|ms|s|min|h|d)?\s*", str(text))
    if not m:
        raise SpecError(field, f"not a time: {text!r} (a number with an optional unit us, ms, s, min, h, d)")
    try:
        value = float(m.group(1))
    except ValueError:
        raise SpecError(field, f"not a time: {text!r}") from None
    if value != value or value < 0 or value == float("inf"):
        raise SpecError(field, f"must be a finite time >= 0, got {text!r}")
    return value * _TIME_UNITS[m.group(2) or default_unit]


def _number(field: str, text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise SpecError(field, f"not a number: {text!r}") from None


def _ids(field: str, text: Any) -> tuple[int, ...]:
    out = []
    for part in str(text).split("+"):
        try:
            out.append(int(part))
        except ValueError:
            raise SpecError(field, f"not a 0-based index or a '+' list of them: {text!r}") from None
    return tuple(out)


def _split(name: str, value: Any) -> list[str]:
    if isinstance(value, Mapping):
        keys = _FIELDS[name]
        unknown = sorted(set(value) - set(keys))
        if unknown:
            raise SpecError(f"noise.{name}", f"unknown field {unknown[0]!r}; known: {', '.join(keys)}")
        parts = [value.get(k) for k in keys]
        while parts and parts[-1] is None:
            parts.pop()
        if any(p is None for p in parts):
            raise SpecError(f"noise.{name}", f"needs {', '.join(keys[:len(parts)])}")
        return [str(p) for p in parts]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise SpecError(f"noise.{name}", f"got the number {value!r}: YAML 1.1 reads unquoted 2:0.5 as base 60 (120.5); "
                        f"quote the value ('2:0.5') or give its fields by name")
    return str(value).split(":")


def _need(name: str, parts: list[str], lo: int, hi: int) -> None:
    if not lo <= len(parts) <= hi or any(p.strip() == "" for p in parts):
        form = ":".join(f.upper() if i < lo else f"[{f.upper()}]" for i, f in enumerate(_FIELDS[name][:hi]))
        raise SpecError(f"noise.{name}", f"expected {name}={form}, got {':'.join(parts)!r}")


class _Builder:
    def __init__(self) -> None:
        self.jitter: Jitter | None = None
        self.slow: list[SlowRanks] = []
        self.links: list[SlowLink] = []
        self.flaps: list[LinkFlap] = []
        self.interference: list[Interference] = []
        self.mtbf: dict[str, float] = {}
        self.fail_kw: dict[str, float] = {}
        self.notes: list[str] = []

    def item(self, name: str, value: Any) -> None:
        if name not in NAMES:
            raise SpecError("noise", f"unknown item {name!r}; known: {', '.join(NAMES)}")
        self.notes.append(f"{name}={value}")
        if name in _SCALARS:
            key = {"detect": "detect_s", "restart": "restart_s", "checkpoint-every": "checkpoint_interval_s",
                   "horizon": "horizon_s", "maintenance": "maintenance_every_s"}.get(name)
            if (key or "storage_bw_bytes_per_s") in self.fail_kw:  # as a repeated jitter or fail class is
                raise SpecError(f"noise.{name}", "given twice")
            self.fail_kw[key or "storage_bw_bytes_per_s"] = (parse_time_s(f"noise.{name}", value) if key
                                                             else _number(f"noise.{name}", value))
            return
        parts = _split(name, value)
        if name == "jitter":
            _need(name, parts, 2, 3)
            if self.jitter is not None:
                raise SpecError("noise.jitter", "given twice")
            kw = {"alpha": _number("noise.jitter.alpha", parts[2])} if len(parts) > 2 else {}
            self.jitter = Jitter(dist=parts[0].strip(), cv=_number("noise.jitter.cv", parts[1]), **kw)
        elif name in ("slow-node", "slow-gpu"):
            _need(name, parts, 2, 2)
            self.slow.append(SlowRanks(kind=name[5:], ids=_ids(f"noise.{name}", parts[0]),
                                       fraction=_number(f"noise.{name}.fraction", parts[1])))
        elif name == "slow-link":
            _need(name, parts, 2, 3)
            rank = _ids("noise.slow-link.rank", parts[2].strip()) if len(parts) > 2 else (0,)
            if len(rank) != 1:
                raise SpecError("noise.slow-link.rank", f"one 0-based rank, got {parts[2]!r}")
            self.links.append(SlowLink(tier=parts[0].strip(), fraction=_number("noise.slow-link.fraction", parts[1]),
                                       rank=rank[0]))
        elif name == "link-flap":
            _need(name, parts, 2, 3)
            kw = {"penalty_s": parse_time_s("noise.link-flap.penalty", parts[2])} if len(parts) > 2 else {}
            self.flaps.append(LinkFlap(tier=parts[0].strip(), prob=_number("noise.link-flap.prob", parts[1]), **kw))
        elif name == "fail":
            self._fail(parts)
        else:
            _need(name, parts, 2, 3)
            phase = parts[2].strip() if len(parts) > 2 else "random"
            if phase not in ("aligned", "random"):
                raise SpecError(f"noise.{name}.phase", f"must be aligned or random, got {phase!r}")
            self.interference.append(Interference(name=name, period_s=parse_time_s(f"noise.{name}.period", parts[0]),
                                                  pause_s=parse_time_s(f"noise.{name}.pause", parts[1]),
                                                  aligned=phase == "aligned"))

    def _fail(self, parts: list[str]) -> None:
        if len(parts) == 1 and parts[0].strip() == "llama3":
            for cls, h in llama3_mtbf_h():
                self._set_mtbf(cls, h)
            self.fail_kw.setdefault("maintenance_every_s", LLAMA3_HOURS * 3600.0 / LLAMA3_PLANNED)
            return
        _need("fail", parts, 2, 2)
        cls = parts[0].strip()
        if cls not in FAILURE_CLASSES:
            raise SpecError("noise.fail", f"unknown component class {cls!r}; known: {', '.join(FAILURE_CLASSES)} "
                            "(or fail=llama3)")
        self._set_mtbf(cls, parse_time_s(f"noise.fail.{cls}", parts[1], default_unit="h") / 3600.0)

    def _set_mtbf(self, cls: str, hours: float) -> None:
        if cls in self.mtbf:
            raise SpecError("noise.fail", f"class {cls!r} given twice")
        self.mtbf[cls] = hours

    def build(self) -> NoiseSpec:
        failures = None
        if self.mtbf or self.fail_kw:
            failures = Failures(mtbf_h=tuple(self.mtbf.items()), **self.fail_kw)
        return NoiseSpec(jitter=self.jitter, slow=tuple(self.slow), slow_links=tuple(self.links),
                         flaps=tuple(self.flaps), interference=tuple(self.interference), failures=failures,
                         notes=tuple(self.notes))


def parse_noise(specs: Iterable[str | Mapping]) -> NoiseSpec:
    """Build a NoiseSpec from `--noise` strings (each a comma-separated list of items) and parsed noise files
    (mappings of item names to values), in order."""
    b = _Builder()
    for spec in specs:
        if not isinstance(spec, str):  # a parsed noise file (a mapping; anything else is refused by name)
            _add_mapping(b, spec)
            continue
        for item in str(spec).split(","):
            if not item.strip():
                continue
            if "=" not in item:
                raise SpecError("noise", f"item {item.strip()!r} is not NAME=VALUE; known names: {', '.join(NAMES)}")
            name, value = item.split("=", 1)
            b.item(name.strip(), value.strip())
    return b.build()


def _add_mapping(b: _Builder, data: Any) -> None:
    if not isinstance(data, Mapping):
        got = "nothing (an empty file)" if data is None else f"a {type(data).__name__}"
        raise SpecError("noise", f"a noise file must hold a mapping of item names to values, got {got}")
    for name, value in data.items():
        for v in (value if isinstance(value, list) else [value]):
            b.item(str(name), v)


def noise_from_mapping(data: Any) -> NoiseSpec:
    """Build a NoiseSpec from a YAML/JSON mapping with the same names as the `--noise` grammar."""
    b = _Builder()
    _add_mapping(b, data)
    return b.build()
