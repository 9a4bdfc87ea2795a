"""Leave one source out with the calibration refitted per fold: the honest form of the band check (issue 10: "fit
on all sources but one, predict that one").

`narrowpath.validate.regenerate.loso_coverage` (docs/validation.md) builds each held-out case's band from the other
sources' residuals, but its residuals come from the shipped profiles, which `benchmarks/fit_profiles.py` fitted on
every source's dense cases — the held-out one's too. Here, per held-out source S and per profile its cases use
(the root of an `extends` chain: H800 / H200 / H100 96 GB take H100's fitted constants, B300 B200's, A100 40 GB
A100 80 GB's), the device constants are refitted exactly as fit_profiles fits them (dense cases of that device,
the shipped host constants kept) on that device's cases from every other source; S's cases and the other
sources' cases on the refitted devices are priced again with the fold's profiles, and the band of each S case is
built from the fold's other-source residuals.

Nothing fitted on S may price S's cases:
- a format the shipped fit derived from data (the dense cases' formats, fp16 with bf16, fp4 with nvfp4, the flash
  efficiency) but the fold has no case of is dropped from the fold's profile, so the calibration's own fallback
  (`Calibration.matrix_eff`: mxfp8 → fp8 → bf16, nvfp4 → fp4 → fp8) reads a constant the fold did fit or a prior;
- a device with no dense case left outside S takes the fold's constants of the device whose fitted constants it
  would carry had it none (PRIOR_DEVICE — as the catalog's B300 carries B200's): GB300's are all Megatron-Bridge
  runs, so with Megatron-Bridge held out GB300 is priced with GB200 refitted on NeMo's GB200 runs. Until the
  fifty-sixth session such a device kept its shipped constants — fitted on S itself — and its 52 cases, 47 of them
  inside their bands, were counted as out-of-fold (73.5 % coverage; 69.5 % without them). A device with neither
  is counted apart ("no refit") and `validate.regenerate.loso_coverage` leaves it out.

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
import dataclasses
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
from narrowpath.validate.regenerate import band_scale, residual_records  # noqa: E402
from narrowpath.validate.run import regimes  # noqa: E402


PRIOR_DEVICE = {"GB300": "GB200"}
"""Device → the device whose fitted constants it carries when it has no dense case of its own (in a fold): GB300
(Blackwell Ultra in an NVL72 rack) ← GB200 (Blackwell in the same rack design), as the catalog's B300 ← B200."""


def data_keys(cases) -> set[str]:
    """The calibration entries fit_profiles.fit_device derives from `cases` (their dense cases' formats, fp16 with
    bf16 and fp4 with nvfp4, which the profiles write alike, and the flash efficiency); empty without a dense case."""
    precisions = {c.scenario.plan.precision for c in cases if c.scenario.model.moe is None}
    if not precisions:
        return set()
    keys = {k for k in ("bf16", "fp8", "mxfp8", "nvfp4") if k in precisions or (k == "bf16" and "fp16" in precisions)}
    keys |= {"fp16"} if "bf16" in keys else set()
    keys |= {"fp4"} if "nvfp4" in keys else set()
    return keys | {"flash"}


def fold_calibration(device: str, params: dict, drop: set[str], host: dict):
    """`device`'s profile with the fold's fitted `params` and without the data-derived entries `drop` the fold did
    not refit (the calibration's fallback chain then reads what the fold fitted, or a prior)."""
    base = calibration_for(device)
    eff = {k: v for k, v in base.matrix_efficiency.items() if k not in drop or k in params}
    base = dataclasses.replace(base, matrix_efficiency=eff)
    return fp._cal(base, {**params, **host})


def root_device(device: str) -> str:
    """The profile whose fitted constants a device's profile takes (its `extends` chain's root)."""
    profiles = store.entries("profiles")
    parent = store.parents("profiles")  # entries() resolves `extends` and drops it: until the fifty-sixth session
    # this read it there and every device was its own root (B300's 16 cases never refitted: in-sample)
    by_device = {data.get("device", pid): pid for pid, data in profiles.items()}
    pid = by_device.get(device)
    while pid in parent:
        pid = parent[pid]
    return profiles[pid].get("device", pid) if pid in profiles else device


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
    roots |= {PRIOR_DEVICE[r] for r in roots if r in PRIOR_DEVICE}
    params, refit, drop = {}, set(), {}
    for r in sorted(roots):
        rest = [c for c in by_dev.get(r, []) if source_of(c) != src]
        drop[r] = data_keys(by_dev.get(r, [])) - data_keys(rest)  # fitted on S alone
        p = fp.fit_device(rest, calibration_for(r), host) if rest else {}
        if p:
            params[r] = p
            refit.add(r)
    for r in sorted(roots):  # a device with nothing left takes its prior's fold constants
        if r not in params and PRIOR_DEVICE.get(r) in params:
            params[r] = params[PRIOR_DEVICE[r]]
            drop[r] = data_keys(by_dev.get(r, []))
            refit.add(r)

    def cal_of(case):
        dev = case.scenario.system.device.name
        r = root_device(dev)
        return fold_calibration(dev, params[r], drop[r], host) if r in params else None

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
    scale_ship, scale_fold = band_scale(shipped_train), band_scale(train)
    out = {"n": 0, "hit_shipped": 0, "hit_refit": 0, "abs_shipped": 0.0, "abs_refit": 0.0, "no_refit": 0,
           "refit": {r: {k: v for k, v in params[r].items() if k not in host} for r in sorted(refit)}, "oof": {}}
    for c in held:
        rec = shipped[c.id]["record"]
        r_ship = rec["residual"]
        own = cal_of(c)
        r_fold = residual(c, own) if own is not None else r_ship
        if r_fold is None:
            continue
        out["oof"][c.id] = {"residual": r_ship, "oof": round(r_fold, 6), "refit": own is not None}
        if own is None:
            out["no_refit"] += 1
        # at the scale calibrated on the other sources alone (validate.regenerate.band_scale, nested): the shipped
        # one saw `src` too
        b_ship = band_from_cases(1.0, rec["features"], shipped_train, scale=scale_ship)
        b_fold = band_from_cases(1.0, rec["features"], train, scale=scale_fold)
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
          f"with no dense case outside their source and no prior (shipped constants kept: left out of the docs' "
          f"coverage); {time.perf_counter() - t0:.0f} s")
    if args.write:
        path = Path(str(resources.files("narrowpath.catalog").joinpath("residuals_oof.json")))
        path.write_text(json.dumps({"schema": "narrowpath-residuals-oof/1", "note": "generated by python "
                                    "benchmarks/loso_refit.py --write; do not edit",
                                    "cases": dict(sorted(oof.items()))}, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path} ({len(oof)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
