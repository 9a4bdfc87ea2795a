"""Probe results and nccl-tests logs → a calibration profile in the `narrowpath-calibration/1` schema.

The profile is the mapping `narrowpath.catalog.resolve.calibration_from` loads (`--profile FILE`). Each figure
comes from one fit in `fit.py`, and each fit's RMS relative residual goes to `fit_residuals`:
- matrix_efficiency[dtype] = R∞ / peak and matrix_half_flop = F½ of the GEMM ramp (best backend per dtype);
  matrix_efficiency_by_size[dtype] = each measured (FLOPs, attained / peak);
- memory_levels = the memory probe's levels; vector_bw_efficiency = farthest level's bandwidth / peak
  memory bandwidth (only when that peak is known, e.g. from `--device`);
- tiers[t]: alpha_s from the α-β fit of all_reduce (else the first op measured); bw_efficiency = large-message
  busbw / line rate (only when the line rate is known, from `--system` or `--line-rate`), where large-message
  busbw is the median busbw over sizes ≥ 1/8 of the largest (the plateau nccl-tests users quote).
Efficiencies above 1 (a low peak estimate, e.g. a CPU in turbo) are clipped to 1 and say so in `sources` and in
the report's warnings; above MAX_OVER_PEAK the peak (or the result) is wrong and the fit is refused. Efficiencies
keep 4 significant figures, so a tiny one is never rounded to 0 (which the reader rejects).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from narrowpath.measure.busbw import bus_factor
from narrowpath.measure.fit import fit_alpha_beta, fit_matrix_ramp
from narrowpath.measure.nccl_tests import NcclTestsLog
from narrowpath.measure.segment import NOISY_SPREAD, rms_rel_spread
from narrowpath.spec.calibration import EFFICIENCY_KEYS, SCHEMA

MAX_OVER_PEAK = 2.0
"""Measured / peak above which a fit is refused: a CPU's estimated peak can be low by a turbo factor (clipped to 1
with a warning), but twice the peak means the wrong peak or someone else's numbers."""


@dataclass
class TierPoints:
    """Measured (size, time) points of one collective on one tier, from a probe or an nccl-tests log."""

    tier: str
    op: str
    num_ranks: int
    size_bytes: list[float]
    time_s: list[float]
    source: str


@dataclass
class FitReport:
    """The profile mapping plus one line per fit (what, value, residual) for the terminal."""

    profile: dict[str, Any]
    lines: list[dict[str, Any]] = field(default_factory=list)
    """One per fit; `written: False` marks a fit whose figure did not go into the profile (a tier without a line
    rate)."""
    warnings: list[str] = field(default_factory=list)
    """What the user should know about the fit (a figure clipped to the peak, a part left out)."""


_TEXT, _COUNT, _POSITIVE = "text", "number >= 0", "number > 0"
_RESULT_SHAPE: dict[str, dict[str, Any]] = {
    "compute": {"samples": {"dtype": _TEXT, "backend": _TEXT, "flop": _POSITIVE, "flops_per_s": _POSITIVE}},
    "memory": {"level_kernel": _TEXT,
               "levels": {"name": _TEXT, "capacity_bytes": _POSITIVE, "bandwidth_bytes_per_s": _POSITIVE,
                          "first_working_set_bytes": _COUNT, "last_working_set_bytes": _COUNT},
               "samples": {"kernel": _TEXT, "working_set_bytes": _COUNT, "bandwidth_bytes_per_s": _POSITIVE}},
    "collectives": {"tier": _TEXT, "num_ranks": _POSITIVE,
                    "samples": {"op": _TEXT, "size_bytes": _COUNT, "time_s": _POSITIVE}},
}


def _bad_value(value: Any, kind: str) -> bool:
    if kind == _TEXT:
        return not isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return True
    return value < 0 or (kind == _POSITIVE and value == 0)


def check_probe_result(result: Any, source: str) -> None:
    """A `narrowpath probe` result has the fields the fits read; the error names the file and the field."""
    from narrowpath.errors import NarrowpathError
    kind = result.get("probe") if isinstance(result, Mapping) else None
    for key, want in _RESULT_SHAPE.get(kind, {}).items():
        value = result.get(key)
        if isinstance(want, str):
            if _bad_value(value, want):
                raise NarrowpathError(f"{source}: {kind}.{key}: expected a {want}, got {value!r}"[:300])
            continue
        if not isinstance(value, list) or not value:
            raise NarrowpathError(f"{source}: {kind}.{key}: expected a non-empty list, got {value!r}"[:300])
        for i, item in enumerate(value):
            for field_name, kind_of in want.items():
                got = item.get(field_name) if isinstance(item, Mapping) else None
                if _bad_value(got, kind_of):
                    raise NarrowpathError(f"{source}: {kind}.{key}[{i}].{field_name}: expected a {kind_of}, "
                                          f"got {got!r}"[:300])


def large_message_busbw(op: str, num_ranks: int, size_bytes: list[float], time_s: list[float]) -> float:
    """Median busbw over the sizes at least 1/8 of the largest (nccl-tests' large-message plateau)."""
    top = max(size_bytes)
    return statistics.median(s / t * bus_factor(op, num_ranks) for s, t in zip(size_bytes, time_s) if s >= top / 8)


def tier_points_from_probe(result: Mapping[str, Any]) -> list[TierPoints]:
    by_op: dict[str, TierPoints] = {}
    for r in result["samples"]:
        tp = by_op.setdefault(r["op"], TierPoints(result["tier"], r["op"], result["num_ranks"], [], [],
                                                  f"narrowpath probe collectives ({result['backend']}, "
                                                  f"{result['num_ranks']} ranks, {result['device']})"))
        tp.size_bytes.append(r["size_bytes"])
        tp.time_s.append(r["time_s"])
    return list(by_op.values())


def tier_points_from_log(log: NcclTestsLog, *, tier: str, op: str | None, num_ranks: int | None,
                         name: str) -> TierPoints:
    """The points of one nccl-tests test; `op` and `num_ranks` (the --op and --ranks flags) stand in for what the
    log does not say and must not contradict what it says (`nccl_tests.op_and_ranks`)."""
    from narrowpath.errors import NarrowpathError
    from narrowpath.measure.nccl_tests import op_and_ranks
    op, n = op_and_ranks(log, name, op=op, num_ranks=num_ranks)
    if not op:
        raise NarrowpathError(f"{name}: the log does not name its test; pass --op (e.g. all_reduce)")
    if not n:
        raise NarrowpathError(f"{name}: the log lists no ranks; pass --ranks N")
    rows = [r for r in log.rows if r.time_s > 0]
    dev = f", {log.devices[0]}" if log.devices else ""
    return TierPoints(tier, op, n, [r.size_bytes for r in rows], [r.time_s for r in rows],
                      f"nccl-tests log {name} ({op}, {n} ranks{dev})")


def _clip(value: float, what: str, sources: dict[str, str], warnings: list[str]) -> float:
    """An efficiency of at most 1, with 4 significant figures: above 1 it is clipped (and said so), above
    MAX_OVER_PEAK refused."""
    from narrowpath.errors import NarrowpathError
    if value > MAX_OVER_PEAK:
        raise NarrowpathError(f"{what}: measured {value:.3g}x the peak it is divided by; the peak is wrong for what "
                              "was measured (give the right --device/--peak/--system/--line-rate) or the result "
                              "is not this device's")
    if value > 1.0:
        sources[what] = sources.get(what, "") + f" [measured {value:.3f} of peak: peak estimate too low, clipped to 1]"
        warnings.append(f"{what}: measured {value:.3f} of the peak, clipped to 1 (peak estimate too low?)")
        return 1.0
    return float(f"{value:.4g}")


def _matrix(compute: Mapping[str, Any], peaks: Mapping[str, float], prof: dict, rep: FitReport) -> None:
    sources, residuals = prof["sources"], prof["fit_residuals"]
    peak_table = {dt: v["peak_flops_per_s"] for dt, v in compute.get("peaks", {}).items()}
    peak_table.update(peaks)
    eff, by_size, half = {}, {}, {}
    dtypes = list(dict.fromkeys(s["dtype"] for s in compute["samples"]))
    left_out = [dt for dt in dtypes if dt not in EFFICIENCY_KEYS]
    if left_out:  # e.g. the NumPy fp64 GEMMs of a CPU probe: the cost model has no such format
        sources["matrix_efficiency.left_out"] = (f"{', '.join(left_out)} GEMMs measured but not written: not a "
                                                 f"calibration format ({', '.join(EFFICIENCY_KEYS)})")
        rep.warnings.append(f"matrix_efficiency: {', '.join(left_out)} GEMMs left out (no such format in a "
                            "calibration profile)")
    for dtype in (dt for dt in dtypes if dt in EFFICIENCY_KEYS):
        rows = [s for s in compute["samples"] if s["dtype"] == dtype]
        backend = max(rows, key=lambda s: s["flops_per_s"])["backend"]
        rows = sorted((s for s in rows if s["backend"] == backend), key=lambda s: s["flop"])
        peak = peak_table.get(dtype, 0.0)
        if peak <= 0:
            continue
        # GEMMs a GPU ran as launches from Python (a probe before CUDA-graph timing, or a failed capture) sit on the
        # host's launch interval at small sizes: those leave the ramp and the size table
        launched = backend == "torch-cuda" and any(s.get("timing", "launches") == "launches" for s in rows)
        ramp = fit_matrix_ramp([s["flop"] for s in rows], [s["flops_per_s"] for s in rows], floor=launched)
        rows = rows[ramp.floor_points:]
        key = f"matrix_efficiency.{dtype}"
        sources[key] = (f"{backend} GEMM sweep on {rows[0]['device']}, n={rows[0]['n']}..{rows[-1]['n']}, "
                        f"median of {rows[0]['repeats']}; R_inf {ramp.rate_flop_per_s / 1e9:.1f} GFLOP/s / peak "
                        f"{peak / 1e9:.1f} GFLOP/s" + (f"; the {ramp.floor_points} smallest sizes left out of the ramp "
                                                       "(floor-bound: fit.floor_bound_points)"
                                                       if ramp.floor_points else ""))
        eff[dtype] = _clip(ramp.rate_flop_per_s / peak, key, sources, rep.warnings)
        by_size[dtype] = [[s["flop"], _table_eff(s["flops_per_s"] / peak)] for s in rows]
        if not (ramp.floor_points and ramp.half_flop <= 0):  # else the launch floor hid F½: not measured
            half[dtype] = ramp.half_flop
        residuals[key] = round(ramp.fit.rms_rel_residual, 4)
        rep.lines.append({"fit": key, "value": eff[dtype], "rms_rel_residual": ramp.fit.rms_rel_residual,
                          "points": len(rows)})
    if eff:
        prof["matrix_efficiency"] = eff
        prof["matrix_efficiency_by_size"] = by_size
    dt = next((d for d in ("bf16", "fp32") if d in eff), next(iter(eff), None))  # the ramp F½ is read from
    if dt in half:
        prof["matrix_half_flop"] = float(f"{half[dt]:.3g}")
        sources["matrix_half_flop"] = f"F_half of the {dt} GEMM ramp fit (t = F_half/R_inf + F/R_inf)"
    elif dt is not None:
        rep.warnings.append(f"matrix_half_flop not measured: the small {dt} GEMMs sat on the host's launch interval "
                            "(timed as launches); the base/default value stays")


def _memory(memory: Mapping[str, Any], peak_mem_bw: float, prof: dict, rep: FitReport) -> None:
    levels = memory["levels"]
    gpu = memory.get("backend") == "torch-cuda"
    if gpu and (not levels or levels[-1]["name"] != "HBM"):
        from narrowpath.errors import NarrowpathError
        raise NarrowpathError(f"memory probe of {memory.get('device')}: no HBM level (the sweep never left the "
                              "caches); probe again with a larger --max-bytes")
    prof["memory_levels"] = [{"name": lv["name"], "capacity_bytes": float(f"{lv['capacity_bytes']:.4g}"),
                              "bw_bytes_per_s": float(f"{lv['bandwidth_bytes_per_s']:.4g}")} for lv in levels]
    prof["sources"]["memory_levels"] = (f"narrowpath probe memory on {memory['device']}: plateaus of the "
                                        f"'{memory['level_kernel']}' kernel, STREAM byte counting, "
                                        + ("CUDA-graph replays" if gpu else "1 thread"))
    samples = [s for s in memory["samples"] if s["kernel"] == memory["level_kernel"]]
    for lv in levels:
        ys = [s["bandwidth_bytes_per_s"] for s in samples
              if lv["first_working_set_bytes"] <= s["working_set_bytes"] <= lv["last_working_set_bytes"]]
        res = rms_rel_spread(ys, lv["bandwidth_bytes_per_s"])
        prof["fit_residuals"][f"memory_levels.{lv['name']}"] = round(res, 4)
        if res > NOISY_SPREAD:
            rep.warnings.append(f"memory_levels.{lv['name']}: its samples spread {res:.0%} (RMS) about "
                                f"{lv['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s; a noisy sweep: probe again on a quiet "
                                "machine")
        rep.lines.append({"fit": f"memory_levels.{lv['name']}", "value": lv["bandwidth_bytes_per_s"],
                          "rms_rel_residual": res, "points": len(ys)})
    if peak_mem_bw > 0:
        far = levels[-1]["bandwidth_bytes_per_s"]
        prof["sources"]["vector_bw_efficiency"] = (f"farthest level {far / 1e9:.1f} GB/s / peak "
                                                   f"{peak_mem_bw / 1e9:.1f} GB/s")
        prof["vector_bw_efficiency"] = _clip(far / peak_mem_bw, "vector_bw_efficiency", prof["sources"], rep.warnings)


def _tiers(points: Iterable[TierPoints], line_rates: Mapping[str, float], prof: dict, rep: FitReport) -> None:
    chosen: dict[str, TierPoints] = {}
    for tp in points:  # later entries (nccl-tests logs) override earlier ones; all_reduce preferred
        cur = chosen.get(tp.tier)
        if cur is None or tp.op == "all_reduce" or cur.op != "all_reduce":
            chosen[tp.tier] = tp
        ab = fit_alpha_beta(tp.op, tp.num_ranks, tp.size_bytes, tp.time_s)
        key = f"tiers.{tp.tier}.{tp.op}"
        prof["fit_residuals"][key] = round(ab.fit.rms_rel_residual, 4)
        rep.lines.append({"fit": key, "value": ab.alpha_s, "busbw_bytes_per_s": ab.busbw_bytes_per_s,
                          "rms_rel_residual": ab.fit.rms_rel_residual, "points": len(tp.size_bytes)})
    tiers = {}
    for name, tp in chosen.items():
        ab = fit_alpha_beta(tp.op, tp.num_ranks, tp.size_bytes, tp.time_s)
        big = large_message_busbw(tp.op, tp.num_ranks, tp.size_bytes, tp.time_s)
        line = line_rates.get(name, 0.0)
        note = (f"{tp.source}: alpha from the alpha-beta fit of {tp.op}; large-message busbw {big / 1e9:.2f} GB/s")
        if line <= 0:
            prof["sources"][f"tiers.{name}"] = note + "; tier not written: no line rate (--system or --line-rate)"
            rep.warnings.append(f"tiers.{name} not written: no line rate to divide its busbw "
                                f"({big / 1e9:.2f} GB/s) by; give --line-rate {name}=BYTES_PER_S or --system ID")
            for ln in rep.lines:
                if ln["fit"].startswith(f"tiers.{name}."):
                    ln["written"] = False
                    prof["fit_residuals"].pop(ln["fit"], None)
            continue
        key = f"tiers.{name}"
        prof["sources"][key] = note + f" / line rate {line / 1e9:.2f} GB/s"
        tiers[name] = {"bw_efficiency": _clip(big / line, key, prof["sources"], rep.warnings),
                       "alpha_s": float(f"{ab.alpha_s:.3g}"), "measured_num_ranks": tp.num_ranks,
                       "busbw_efficiency_by_size": [[s, _table_eff(s / t * bus_factor(tp.op, tp.num_ranks) / line)]
                                                    for s, t in sorted(zip(tp.size_bytes, tp.time_s))]}
    if tiers:
        prof["tiers"] = {**prof.get("tiers", {}), **tiers}


def _table_eff(eff: float) -> float:
    """busbw / line rate of one measured size: 4 significant figures (a fixed 4 decimals turned the tiny
    efficiencies of small messages into 0, i.e. an infinite time), at most 1."""
    return min(1.0, float(f"{eff:.4g}"))


def calibration_to_dict(cal) -> dict[str, Any]:
    """A Calibration as the YAML mapping the loader reads (the inverse of `calibration_from_dict`)."""
    import dataclasses
    out: dict[str, Any] = {"id": cal.name}
    for f in dataclasses.fields(cal):
        v = getattr(cal, f.name)
        if f.name == "name":
            continue
        if f.name == "tiers":
            v = {k: {**dataclasses.asdict(t), "busbw_efficiency_by_size": [list(p) for p in t.busbw_efficiency_by_size]}
                 for k, t in v.items()}
        elif f.name == "memory_levels":
            v = [dataclasses.asdict(lv) for lv in v]
        elif f.name == "matrix_efficiency_by_size":
            v = {k: [list(p) for p in pts] for k, pts in v.items()}
        elif isinstance(v, Mapping):
            v = dict(v)
        out[f.name] = v
    return out


def build_profile(*, name: str, device: str, compute: Mapping[str, Any] | None = None,
                  memory: Mapping[str, Any] | None = None, tier_points: Iterable[TierPoints] = (),
                  peaks: Mapping[str, float] | None = None, peak_mem_bw_bytes_per_s: float = 0.0,
                  line_rates: Mapping[str, float] | None = None, base=None) -> FitReport:
    """Fit everything given into one profile mapping (validated by building the Calibration).

    `base` (a Calibration, e.g. the device's shipped profile) supplies every figure not measured here;
    without it, unmeasured figures keep the Calibration defaults.
    """
    prof: dict[str, Any] = {"id": name, "device": device, "sources": {}, "fit_residuals": {}}
    if base is not None:
        prof.update({k: v for k, v in calibration_to_dict(base).items() if k not in ("id", "device")})
        prof["sources"] = {k: f"(from base profile {base.name}) {v}" for k, v in prof["sources"].items()}
        prof["fit_residuals"] = dict(prof["fit_residuals"])
    rep = FitReport(prof)
    if compute:
        _matrix(compute, peaks or {}, prof, rep)
    if "matrix_efficiency" not in prof:
        prof["matrix_efficiency"] = {}
        prof["sources"]["matrix_efficiency"] = "not measured: the cost model's default applies"
    if memory:
        _memory(memory, peak_mem_bw_bytes_per_s, prof, rep)
    _tiers(tier_points, line_rates or {}, prof, rep)
    from narrowpath.spec.parse import calibration_from_dict
    calibration_from_dict(prof)  # raises SpecError on anything the loader would reject
    return rep


def written_fits(rep: FitReport) -> list[dict[str, Any]]:
    """The fits whose figures went into the profile (not those measured but left out, e.g. a tier with no line
    rate)."""
    return [ln for ln in rep.lines if ln.get("written", True)]


def profile_document(profile: Mapping[str, Any]) -> dict[str, Any]:
    """The YAML document: schema tag plus a one-profile list (what `calibration_from` loads)."""
    return {"schema": SCHEMA, "profiles": [dict(profile)]}
