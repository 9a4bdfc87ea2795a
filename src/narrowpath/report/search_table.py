"""Terminal table and JSON of a plan search: the best plans, and where the scenario's own plan ranks."""
from __future__ import annotations

import dataclasses

from narrowpath.report.console import table
from narrowpath.search.bands import shown_bands
from narrowpath.search.rank import Candidate, SearchResult

_METRIC = {"time": "step time", "energy": "energy per step", "memory": "memory per rank"}


def _activations(p) -> str:
    """recompute none / selective / full; `sel[layernorm,moe_act]` for selective recompute of the modules named
    (plain `selective`: none named, Megatron-Core's core_attn); `full:N` for N layers of each chunk; `off:N` for N
    layers offloaded."""
    mods = p.recompute_modules if p.recompute == "selective" else ()
    out = (f"sel[{','.join(mods)}]" if mods else p.recompute) + (f":{p.recompute_layers}" if p.recompute_layers
                                                                  else "")
    return out + (f"+off:{p.offload_layers}" if p.offload_layers else "")


def _overlap(p) -> str:
    on = [name for name, flag in (("dp", p.dp_overlap), ("tp", p.tp_comm_overlap), ("ep", p.ep_overlap)) if flag]
    return "+".join(on) or "-"


def _comm(p, moe: bool, buckets_bytes=()) -> str:
    """Bucket (with dp overlap; `buckets_bytes` for a row of several), CP exchange (with cp), expert dispatch (with
    ep)."""
    sizes = sorted(set(buckets_bytes)) or [p.bucket_bytes]
    parts = ["/".join(f"{b / 1e6:g}" for b in sizes) + "MB"] if p.dp_overlap else []
    if p.cp > 1:
        parts.append(p.cp_comm)
    if moe and p.ep > 1:
        parts.append(p.ep_dispatch + ("/fp8" if p.ep_dispatch_format == "fp8" else ""))
    return " ".join(parts) or "-"


def _order(p) -> str:
    sizes = {"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp}
    return "-".join(a for a in p.placement if a != "ep" and sizes[a] > 1) or "-"


def _row(rank: str, c: Candidate, moe: bool, band=None, best: bool = False) -> list:
    p = c.plan
    b, tied = band if band is not None else (None, False)
    span = "-" if b is None else f"{b.low_s:.3g}-{b.high_s:.3g}" + ("" if b.inside else " !")
    expert = [p.ep, p.etp or p.tp] if moe else [p.ep]
    return [rank + (" =" if tied and not best else ""), p.tp, p.pp, p.vpp, p.cp, p.dp, *expert, p.mbs,
            p.zero_stage, _activations(p), "on" if p.sequence_parallel else "off", _overlap(p), _comm(p, moe),
            _order(p), round(c.step_time_s, 3), span, round(100 * c.mfu, 1), round(c.memory_bytes / 1e9, 1),
            round(c.headroom_bytes / 1e9, 1), "-" if c.energy_per_step_j is None else round(c.energy_per_step_j / 1e3, 1),
            round(c.tokens_per_s)]


def headers(moe: bool) -> list[str]:
    return ["rank", "tp", "pp", "vpp", "cp", "dp", "ep", *(["etp"] if moe else []), "mbs", "zero", "activations",
            "sp", "overlap", "comm", "order", "step (s)", "80% band (s)", "MFU (%)", "mem (GB)", "free (GB)",
            "energy (kJ)", "tokens/s"]


HEADERS = headers(False)
_COMM = {False: headers(False).index("comm"), True: headers(True).index("comm")}
SHOWN_PER_ROW = 8
"""Plans the console fetches per row it shows (rows merge plans that price the same)."""
_FREE_KNOBS = ("bucket_bytes", "placement")
"""Knobs whose variants often price the same (a bucket whose sync hides under the backward pass; placements with the
same spans): plans equal in everything else and in their numbers share one row."""


def merged_rows(ranked, top: int) -> list[tuple[int, list[Candidate]]]:
    """The first `top` rows of a ranking: (index of the row's first plan, its plans in ranking order), where plans
    that differ only in _FREE_KNOBS and have exactly the same numbers share a row."""
    rows: dict[tuple, tuple[int, list[Candidate]]] = {}
    for i, c in enumerate(ranked):
        rest = tuple(getattr(c.plan, f.name) for f in dataclasses.fields(c.plan) if f.name not in _FREE_KNOBS)
        key = (c.step_time_s, c.memory_bytes, c.energy_per_step_j, rest)
        if key in rows:
            rows[key][1].append(c)
        elif len(rows) < top:
            rows[key] = (i, [c])
    return list(rows.values())


def _ranks(first: int, members: list[Candidate], ranked) -> str:
    """`3` for one plan, `3-8` for ranks 3 to 8, `3 (+5)` when the row's plans are not consecutive."""
    if len(members) == 1:
        return str(first + 1)
    last = first + len(members)
    if all(ranked[j] is m for j, m in zip(range(first, last), members)):
        return f"{first + 1}-{last}"
    return f"{first + 1} (+{len(members) - 1})"


def format_search(r: SearchResult, top: int) -> str:
    scn = r.base
    moe = scn.model.moe is not None
    pruned = r.num_plans - r.num_priced
    lines = [f"narrowpath search — {scn.model.name} on {scn.num_gpus} x {scn.system.device.name} ({scn.system.name}), "
             f"global batch {scn.plan.gbs} sequences, best by {_METRIC[r.objective]}",
             f"  {r.num_plans:,} consistent plans ({r.extent} space) in {r.elapsed_s:.2f} s: {r.num_priced:,} priced in "
             f"full, {pruned:,} bounded out (their lower bound is above what could rank); {r.num_fit:,} fit in "
             f"{r.ranked[0].capacity_bytes / 1e9 if r.ranked else 0:.1f} GB per GPU"
             + (f" with {r.min_free_bytes / 1e9:g} GB free" if r.min_free_bytes else "")
             + (f"; {r.num_failed:,} could not be placed (first: {r.first_failure})" if r.num_failed else ""), ""]
    groups = merged_rows(r.ranked, top)
    bands = shown_bands(r, max((first for first, _ in groups), default=-1) + 1)
    rows = []
    for first, members in groups:
        row = _row(_ranks(first, members, r.ranked), members[0], moe, bands.get(id(members[0])), best=first == 0)
        row[_COMM[moe]] = _comm(members[0].plan, moe, [c.plan.bucket_bytes for c in members])
        row[_COMM[moe] + 1] = "/".join(dict.fromkeys(_order(c.plan) for c in members))
        rows.append(row)
    b = r.baseline
    if b is not None:
        label = f"yours (>{r.baseline_rank_beyond:,})" if r.baseline_rank_beyond else \
            "yours" if r.baseline_rank is None else f"yours ({r.baseline_rank:,})"
        rows.append(_row(label if r.baseline_in_space else f"{label}*", b, moe, bands.get(id(b))))
    lines.append(table(headers(moe), rows))
    tied = sum(1 for _, m in groups[1:] if bands.get(id(m[0]), (None, False))[1])
    outside = [bd.reason for bd, _ in bands.values() if not bd.inside]
    if r.objective == "time":
        lines.append(f"  = : statistically tied with the best (their 80 % error bands overlap; {tied} of the shown "
                     "rows)")
    else:
        lines.append("  the 80 % bands are of step time; ties are marked only in a ranking by step time")
    if any(len(m) > 1 for _, m in groups):
        lines.append("  a row with a range of ranks holds plans that differ only in bucket size or placement order and "
                     "price the same to the last digit (their bucket sizes and orders listed with /)")
    if outside:
        lines.append(f"  ! : outside the validated regimes — {outside[0]}")
    lines.append("  activations: recompute[:layers per chunk][+off:layers offloaded], sel[modules]: selective "
                 "recompute of those modules; overlap: dp (gradient sync), "
                 "tp (TP comm), ep (MoE all-to-all); comm: bucket, CP exchange, MoE dispatch; order: placement, "
                 "fastest axis first")
    lines.append("")
    lines += _baseline_lines(r)
    if r.pinned:
        lines.append("  pinned: " + ", ".join(f"{k}={v}" for k, v in r.pinned))
    kept = "precision, attention kernel, MoE routing" if r.extent == "full" else \
        "precision, attention kernel, CP exchange, overlap switches, bucket size, placement order"
    kept += "".join(f", {words}" for on, words in ((r.base.plan.cuda_graphs, "CUDA graphs (no full recompute tried)"),
                                                    (r.base.plan.moe_sync_free, "sync-free MoE layers")) if on)
    lines.append(f"  kept from the scenario: {kept}; plans that differ only by an equally costed recompute are shown "
                 "once (the lightest)")
    return "\n".join(lines)


_UNIT = {"time": (1.0, "s", 3), "energy": (1e-3, "kJ", 1), "memory": (1e-9, "GB", 1)}


def _baseline_lines(r: SearchResult) -> list[str]:
    b = r.baseline
    if b is None:
        return ["  the scenario's own plan is not ranked (it does not describe this GPU count and batch, or the model "
                "could not place it)"]
    where = "" if r.baseline_in_space else "* (outside the pinned space, priced apart)"
    if r.baseline_rank is None and not r.baseline_rank_beyond:
        need = f" and {r.min_free_bytes / 1e9:g} GB free" if r.min_free_bytes else ""
        return [f"  the scenario's own plan{where} needs {b.memory_bytes / 1e9:.1f} GB per GPU{need} of "
                f"{b.capacity_bytes / 1e9:.1f} GB: it does not fit"]
    if not r.ranked:
        return []
    best = r.ranked[0]
    scale, unit, nd = _UNIT[r.objective]
    attr = {"time": "step_time_s", "energy": "energy_per_step_j", "memory": "memory_bytes"}[r.objective]
    vb, vo = getattr(best, attr), getattr(b, attr)
    ties = r.baseline_ties
    tie = f" (tied with {ties:,} other plan{'s' if ties > 1 else ''})" if ties else ""
    n = r.baseline_rank_beyond
    place = f"{r.baseline_rank:,}{tie}" if n is None else \
        f"below the first {n:,} (at least {n:,} distinct plan{'s are' if n > 1 else ' is'} faster; " \
        "--rank-limit 0 counts them all)"
    return [f"  the scenario's own plan{where} ranks {place} of the {r.num_ranked:,} distinct plans "
            f"that fit, by {_METRIC[r.objective]}: best {vb * scale:,.{nd}f} {unit} vs yours {vo * scale:,.{nd}f} "
            f"{unit} ({100 * (1 - vb / vo):+.1f} % saved)"]


def candidate_to_json(c: Candidate, band=None) -> dict:
    p = c.plan
    out = {"plan": {"tp": p.tp, "pp": p.pp, "vpp": p.vpp, "cp": p.cp, "dp": p.dp, "ep": p.ep, "etp": p.etp,
                    "mbs": p.mbs, "gbs": p.gbs, "zero_stage": p.zero_stage, "recompute": p.recompute,
                    "recompute_layers": p.recompute_layers, "offload_layers": p.offload_layers,
                    "recompute_modules": list(p.recompute_modules) if p.recompute == "selective" else [],
                    "sequence_parallel": p.sequence_parallel, "dp_overlap": p.dp_overlap,
                    "grad_sync_launch": p.grad_sync_launch, "bucket_bytes": p.bucket_bytes,
                    "tp_comm_overlap": p.tp_comm_overlap, "cp_comm": p.cp_comm,
                    "ep_overlap": p.ep_overlap, "ep_dispatch": p.ep_dispatch,
                    "ep_dispatch_format": p.ep_dispatch_format, "placement": list(p.placement),
                    # kept from the scenario, but a plan copied from here must reproduce its numbers
                    "precision": p.precision, "optimizer_moments": p.optimizer_moments,
                    "grad_precision": p.grad_precision, "fp8_params": p.fp8_params, "activation_cache": p.activation_cache, "attention": p.attention,
                    "moe_routing": p.moe_routing, "moe_sync_free": p.moe_sync_free, "cuda_graphs": p.cuda_graphs},
           "step_time_s": c.step_time_s, "mfu": c.mfu, "tokens_per_s": c.tokens_per_s,
           "memory_bytes": c.memory_bytes, "capacity_bytes": c.capacity_bytes, "headroom_bytes": c.headroom_bytes,
           "fits": c.fits, "energy_per_step_j": c.energy_per_step_j}
    if band is not None:
        b, tied = band
        out["band"], out["validated"] = b.to_json()
        out["tied_with_best"] = tied
    return out


def search_to_json(r: SearchResult, top: int) -> dict:
    """The search as JSON: `best` holds the first `top` ranked plans; `num_candidates` (= `num_plans`) is the whole
    space before pruning, `num_priced` the plans priced in full (the rest were bounded out), `seconds` (=
    `elapsed_s`) the search's wall time; `num_ranked` counts the distinct plans that fit (what `baseline_rank` ranks
    against; null with `baseline_rank_beyond` N when at least N distinct plans are faster, the search's
    --rank-limit, and not all were counted); `fits` of a plan is against capacity alone, `min_free_bytes` is the headroom a ranked plan had to
    leave. Each shown plan carries its error `band`, `validated` and whether it is `tied_with_best` (bands
    overlap)."""
    bands = shown_bands(r, top)
    return {"scenario": r.base.name, "model": r.base.model.name, "system": r.base.system.name,
            "num_gpus": r.base.num_gpus, "gbs": r.base.plan.gbs, "objective": r.objective, "space": r.extent,
            "pinned": {k: (list(v) if isinstance(v, tuple) else v) for k, v in r.pinned},
            "min_free_bytes": r.min_free_bytes,
            "num_plans": r.num_plans, "num_candidates": r.num_candidates, "num_priced": r.num_priced,
            "num_fit": r.num_fit, "num_ranked": r.num_ranked,
            "num_failed": r.num_failed, "first_failure": r.first_failure, "elapsed_s": r.elapsed_s,
            "seconds": r.elapsed_s,
            "best": [candidate_to_json(c, bands.get(id(c))) for c in r.ranked[:top]],
            "baseline": None if r.baseline is None else candidate_to_json(r.baseline, bands.get(id(r.baseline))),
            "baseline_in_space": r.baseline_in_space, "baseline_rank": r.baseline_rank,
            "baseline_rank_beyond": r.baseline_rank_beyond,
            "baseline_ties": r.baseline_ties}
