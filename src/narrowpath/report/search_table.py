"""Terminal table and JSON of a plan search: the best plans, and where the scenario's own plan ranks."""
from __future__ import annotations

from narrowpath.report.console import table
from narrowpath.search.rank import Candidate, SearchResult

_METRIC = {"time": "step time", "energy": "energy per step", "memory": "memory per rank"}


def _row(rank: str, c: Candidate) -> list:
    p = c.plan
    return [rank, p.tp, p.pp, p.vpp, p.cp, p.dp, p.ep, p.mbs, p.zero_stage, p.recompute,
            "on" if p.sequence_parallel else "off", round(c.step_time_s, 3), round(100 * c.mfu, 1),
            round(c.memory_bytes / 1e9, 1), round(c.headroom_bytes / 1e9, 1),
            "-" if c.energy_per_step_j is None else round(c.energy_per_step_j / 1e3, 1), round(c.tokens_per_s)]


HEADERS = ["rank", "tp", "pp", "vpp", "cp", "dp", "ep", "mbs", "zero", "recompute", "sp", "step (s)", "MFU (%)",
           "mem (GB)", "free (GB)", "energy (kJ)", "tokens/s"]


def format_search(r: SearchResult, top: int) -> str:
    scn = r.base
    lines = [f"narrowpath search — {scn.model.name} on {scn.num_gpus} x {scn.system.device.name} ({scn.system.name}), "
             f"global batch {r.ranked[0].plan.gbs if r.ranked else '?'} sequences, best by {_METRIC[r.objective]}",
             f"  {r.num_plans:,} consistent plans priced in {r.elapsed_s:.2f} s "
             f"({r.num_plans / max(r.elapsed_s, 1e-9):,.0f} plans/s); {r.num_fit:,} fit in "
             f"{r.ranked[0].capacity_bytes / 1e9 if r.ranked else 0:.1f} GB per GPU"
             + (f" with {r.min_free_bytes / 1e9:g} GB free" if r.min_free_bytes else "")
             + (f"; {r.num_failed:,} could not be placed (first: {r.first_failure})" if r.num_failed else ""), ""]
    rows = [_row(str(i + 1), c) for i, c in enumerate(r.ranked[:top])]
    b = r.baseline
    if b is not None:
        rows.append(_row("yours" if r.baseline_rank is None else f"yours ({r.baseline_rank})", b))
    lines.append(table(HEADERS, rows))
    lines.append("")
    if b is None:
        lines.append("  the scenario's own plan is not in the space (it does not match the pins, batch or GPU count, "
                     "or the model could not place it)")
    elif r.baseline_rank is None:
        lines.append(f"  the scenario's own plan needs {b.memory_bytes / 1e9:.1f} GB per GPU of "
                     f"{b.capacity_bytes / 1e9:.1f} GB: it does not fit")
    elif r.ranked:
        best = r.ranked[0]
        gain = 1 - best.step_time_s / b.step_time_s
        lines.append(f"  the scenario's own plan ranks {r.baseline_rank} of the {len(r.ranked):,} distinct plans that fit; "
                     "the best plan's step is "
                     f"{best.step_time_s:.3f} s vs {b.step_time_s:.3f} s ({100 * gain:+.1f} % time saved)")
    lines.append("  kept from the scenario: precision, attention kernel, overlap switches, placement order; "
                 "plans that differ only by an equally costed recompute are shown once (the lightest)")
    return "\n".join(lines)


def candidate_to_json(c: Candidate) -> dict:
    p = c.plan
    return {"plan": {"tp": p.tp, "pp": p.pp, "vpp": p.vpp, "cp": p.cp, "dp": p.dp, "ep": p.ep, "mbs": p.mbs,
                     "gbs": p.gbs, "zero_stage": p.zero_stage, "recompute": p.recompute,
                     "sequence_parallel": p.sequence_parallel},
            "step_time_s": c.step_time_s, "mfu": c.mfu, "tokens_per_s": c.tokens_per_s,
            "memory_bytes": c.memory_bytes, "capacity_bytes": c.capacity_bytes, "fits": c.fits,
            "energy_per_step_j": c.energy_per_step_j}


def search_to_json(r: SearchResult, top: int) -> dict:
    return {"scenario": r.base.name, "model": r.base.model.name, "system": r.base.system.name,
            "num_gpus": r.base.num_gpus, "objective": r.objective, "num_plans": r.num_plans, "num_fit": r.num_fit,
            "num_failed": r.num_failed, "first_failure": r.first_failure, "elapsed_s": r.elapsed_s,
            "best": [candidate_to_json(c) for c in r.ranked[:top]],
            "baseline": None if r.baseline is None else candidate_to_json(r.baseline),
            "baseline_rank": r.baseline_rank}
