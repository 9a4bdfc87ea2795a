"""Leave one source out with the calibration refitted per fold: the honest form of the band check (issue 10: "fit
on all sources but one, predict that one").

`narrowpath.validate.regenerate.loso_coverage` (docs/validation.md) builds each held-out case's band from the other
sources' residuals, but its residuals come from the shipped profiles, which `benchmarks/fit_profiles.py` fitted on
every source's dense cases — the held-out one's too. Here, per held-out source S and per profile its cases use
(the root of an `extends` chain: H800 / H200 / H100 96 GB take H100's fitted constants, B300 B200's, A100 40 GB
A100 80 GB's), the device constants are refitted exactly as fit_profiles fits them (dense cases of that device,
the shipped host constants kept) on that device's cases from every other source; S's cases and the other
sources' cases on the refitted devices are priced again with the fold's profiles, and the band of each S case is
built from the fold's other-source residuals. A device with no dense case left outside S keeps its shipped
constants; its cases are counted apart ("no refit": in-sample as before).

    python benchmarks/loso_refit.py                    # every source (about six minutes on two cores)
    python benchmarks/loso_refit.py --sources Korthikanti NVIDIA/NeMo
    python benchmarks/loso_refit.py --write            # also write catalog/residuals_oof.json

`--write` records each case's out-of-fold residual (its source held out of the fit) beside the in-sample one it
was computed against: the error bands are built from these (analysis.band; conformal-style: a band for a plan the
fit never saw is calibrated on errors of cases the fit never saw), and `python -m narrowpath.validate.regenerate
--check` fails when an in-sample residual no longer matches (the model changed: run this again).

Not part of `.ci/run`. Prints per source: inside the band / cases with the shipped profiles (the docs' figure),
with the fold's refitted profiles, and mean |ln(predicted / measured)| both ways.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fit_profiles as fp  # noqa: E402  (the fit itself, not a copy of it)

from narrowpath.analysis.band import band_from_cases  # noqa: E402
from narrowpath.catalog import calibration_for  # noqa: E402
from narrowpath.catalog import store  # noqa: E402
from narrowpath.errors import NarrowpathError  # noqa: E402
from narrowpath.schedule.step import predict  # noqa: E402
from narrowpath.validate.regenerate import residual_records  # noqa: E402
from narrowpath.validate.run import regimes  # noqa: E402


def root_device(device: str) -> str:
    """The profile whose fitted constants a device's profile takes (its `extends` chain's root)."""
    by_device = {data.get("device", pid): data for pid, data in store.entries("profiles").items()}
    seen = set()
    while device in by_device and by_device[device].get("extends") and device not in seen:
        seen.add(device)
        device = by_device[device]["extends"]
    return device


def source_of(case) -> str:
    return regimes(case.scenario, case.source)["source"][0]


def residual(case, cal) -> float | None:
    try:
        return math.log(predict(case.scenario, cal).step_time_s / case.measured_step_time_s)
    except NarrowpathError:
        return None


def fold(src: str, by_dev: dict, shipped: dict[str, dict], host: dict) -> dict:
    """Coverage of source `src` with the profiles refitted without it."""
    held = [c for cases in by_dev.values() for c in cases if source_of(c) == src and c.id in shipped]
    roots = {root_device(c.scenario.system.device.name) for c in held}
    params, refit = {}, set()
    for r in sorted(roots):
        rest = [c for c in by_dev.get(r, []) if source_of(c) != src]
        p = fp.fit_device(rest, calibration_for(r), host) if rest else {}
        if p:
            params[r] = p
            refit.add(r)

    def cal_of(case):
        dev = case.scenario.system.device.name
        r = root_device(dev)
        return fp._cal(calibration_for(dev), {**params[r], **host}) if r in params else None

    train = []
    for rec in shipped.values():
        if rec["source"] == src:
            continue
        case = rec["case"]
        if root_device(case.scenario.system.device.name) in refit:
            res = residual(case, cal_of(case))
            if res is None:
                continue
            train.append({**rec["record"], "residual": res})
        else:
            train.append(rec["record"])
    shipped_train = [rec["record"] for rec in shipped.values() if rec["source"] != src]
    out = {"n": 0, "hit_shipped": 0, "hit_refit": 0, "abs_shipped": 0.0, "abs_refit": 0.0, "no_refit": 0,
           "refit": {r: {k: v for k, v in params[r].items() if k not in host} for r in sorted(refit)}, "oof": {}}
    for c in held:
        rec = shipped[c.id]["record"]
        r_ship = rec["residual"]
        own = cal_of(c)
        r_fold = residual(c, own) if own is not None else r_ship
        if r_fold is None:
            continue
        out["oof"][c.id] = {"residual": r_ship, "oof": round(r_fold, 6)}
        if own is None:
            out["no_refit"] += 1
        b_ship = band_from_cases(1.0, rec["features"], shipped_train)
        b_fold = band_from_cases(1.0, rec["features"], train)
        out["n"] += 1
        out["hit_shipped"] += b_ship.low_s <= math.exp(-r_ship) <= b_ship.high_s
        out["hit_refit"] += b_fold.low_s <= math.exp(-r_fold) <= b_fold.high_s
        out["abs_shipped"] += abs(r_ship)
        out["abs_refit"] += abs(r_fold)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", nargs="*", help="hold out only these sources (default: every one)")
    ap.add_argument("--write", action="store_true", help="write catalog/residuals_oof.json (every source)")
    args = ap.parse_args()
    if args.write and args.sources:
        ap.error("--write needs every source held out in turn: drop --sources")
    t0 = time.perf_counter()
    by_dev = fp.device_cases()
    cases = {c.id: c for cs in by_dev.values() for c in cs}
    shipped = {}
    for rec in residual_records():
        case = cases[rec["id"]]
        shipped[rec["id"]] = {"source": rec["source"], "record": rec, "case": case}
    base = calibration_for(next(iter(by_dev)))
    host = {"host_dispatch_s": base.host_dispatch_s, "host_sync_s": base.host_sync_s}
    sources = args.sources or sorted({r["source"] for r in shipped.values()})
    tot = {"n": 0, "hit_shipped": 0, "hit_refit": 0, "no_refit": 0}
    oof = {}
    print(f"{'source':30s} {'cases':>5s} {'shipped':>8s} {'refit':>8s} {'|ln r| shipped':>15s} {'refit':>7s}  "
          "no refit  refitted constants")
    for src in sources:
        f = fold(src, by_dev, shipped, host)
        n = max(1, f["n"])
        print(f"{src:30s} {f['n']:5d} {f['hit_shipped']:8d} {f['hit_refit']:8d} {f['abs_shipped'] / n:15.3f} "
              f"{f['abs_refit'] / n:7.3f}  {f['no_refit']:8d}  {f['refit']}", flush=True)
        for k in tot:
            tot[k] += f[k]
        oof.update(f["oof"])
    n = max(1, tot["n"])
    print(f"{'all':30s} {tot['n']:5d} {tot['hit_shipped']:8d} {tot['hit_refit']:8d}   coverage shipped "
          f"{tot['hit_shipped'] / n:.1%}, refitted {tot['hit_refit'] / n:.1%}; {tot['no_refit']} cases on a device "
          f"with no dense case outside their source (shipped constants kept); {time.perf_counter() - t0:.0f} s")
    if args.write:
        path = Path(str(resources.files("narrowpath.catalog").joinpath("residuals_oof.json")))
        path.write_text(json.dumps({"schema": "narrowpath-residuals-oof/1", "note": "generated by python "
                                    "benchmarks/loso_refit.py --write; do not edit",
                                    "cases": dict(sorted(oof.items()))}, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path} ({len(oof)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
