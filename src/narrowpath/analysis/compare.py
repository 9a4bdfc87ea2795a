"""Two analyses side by side: every account and budget with its delta, and one sentence per change saying what
moved and why.

Deltas are b − a (positive = B larger). Each carries the JSON path of its value in the output it comes from —
`predict --json` for the prediction's own numbers (step, breakdown, memory, throughput, transfers), `analyze
--json` for the accounts built on it — so every number traces back to the side's own prediction.
Sentences, one per line, in the order a reader asks: what differs between the scenarios, the step, each component
of the step that moved by more than SIGNIFICANT of the step (with the cause read off the transfer rows, the
FLOPs or the schedule), memory, energy, and where the narrowest path went.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from narrowpath.analysis.analyze import Analysis
from narrowpath.analysis.context import rank_stages
from narrowpath.analysis.remedies import stage_layer_text
from narrowpath.analysis.verdict import component_label
from narrowpath.schedule.step import BREAKDOWN_KEYS, bucket_axes

SIGNIFICANT = 0.01
"""A component is explained when it moves by more than 1 % of the larger step, or by more than a quarter of the
step's own change (so that a small change is still explained), and by more than 0.01 % of the step."""
TIER_WORDS = {"scale_up": "the scale-up links (NVLink)", "scale_out": "the NICs (scale-out)",
              "front_end": "the front-end network", "none": "no network"}
OP_WORDS = {"all_gather": "all-gathers", "reduce_scatter": "reduce-scatters", "all_reduce": "all-reduces",
            "all_to_all": "all-to-alls", "send_recv": "point-to-point sends", "broadcast": "broadcasts"}
BUCKET_AXES = {f"exposed_{b}_comm": bucket_axes(b) for b in ("tp", "cp", "ep", "pp", "dp")}
"""The transfer axes behind each exposed-communication component (DeepSeek's hierarchical ep_inter / ep_intra
exchanges are the ep component's too)."""


@dataclass(frozen=True, slots=True)
class Delta:
    account: str
    """`step`, `breakdown`, `memory`, `throughput`, `transfers`, `data_movement`, `topology`, `synchronisation`,
    `energy` or `verdict`."""
    item: str
    a: float | None
    b: float | None
    delta: float | None
    """b − a (None when one side lacks the item)."""
    unit: str
    source: str
    """`predict` or `analyze`: the side's output the value is read from."""
    path: str
    """JSON path of the value in that output (list items addressed by their name, e.g. `transfers[tp.all_gather]`)."""


@dataclass(frozen=True, slots=True)
class Comparison:
    a: Analysis
    b: Analysis
    deltas: tuple[Delta, ...]
    sentences: tuple[str, ...]


def _d(account, item, a, b, unit, source, path) -> Delta:
    delta = None if a is None or b is None else b - a
    return Delta(account, item, a, b, delta, unit, source, path)


def _transfer_totals(an: Analysis) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for t in an.prediction.transfers:
        tot, exp = out.get(t.name, (0.0, 0.0))
        out[t.name] = (tot + t.total_s, exp + t.exposed_s)
    return out


def prediction_deltas(a: Analysis, b: Analysis) -> list[Delta]:
    pa, pb = a.prediction, b.prediction
    out = [_d("step", "step_time_s", pa.step_time_s, pb.step_time_s, "s", "predict", "step_time_s")]
    out += [_d("breakdown", k, pa.breakdown_s[k], pb.breakdown_s[k], "s", "predict", f"breakdown_s.{k}")
            for k in BREAKDOWN_KEYS]
    out.append(_d("breakdown", "host_wait_s", pa.host_wait_s, pb.host_wait_s, "s", "predict", "host_wait_s"))
    for k, unit in (("tokens_per_s", "1/s"), ("mfu", ""), ("hfu", ""), ("model_tflops_per_gpu", "TFLOP/s"),
                    ("hardware_flop_per_step", "FLOP")):
        out.append(_d("throughput", k, getattr(pa, k), getattr(pb, k), unit, "predict", k))
    out.append(_d("memory", "total_bytes", pa.memory.total_bytes, pb.memory.total_bytes, "B", "predict",
                  "memory.total_bytes"))
    for k in dict.fromkeys(list(pa.memory.items) + list(pb.memory.items)):
        out.append(_d("memory", k, pa.memory.items.get(k), pb.memory.items.get(k), "B", "predict",
                      f"memory.items_bytes.{k}"))
    ta, tb = _transfer_totals(a), _transfer_totals(b)
    for name in dict.fromkeys(list(ta) + list(tb)):
        for i, field in enumerate(("total_s", "exposed_s")):
            va, vb = ta.get(name), tb.get(name)
            out.append(_d("transfers", f"{name}.{field}", va[i] if va else None, vb[i] if vb else None, "s",
                          "predict", f"transfers[{name}].{field}"))
    return out


def analysis_deltas(a: Analysis, b: Analysis) -> list[Delta]:
    out = []
    la, lb = {r.level: r for r in a.data_movement}, {r.level: r for r in b.data_movement}
    for lv in la:
        out.append(_d("data_movement", f"{lv}.bytes_per_step", la[lv].bytes_per_step, lb[lv].bytes_per_step, "B",
                      "analyze", f"data_movement.levels[{lv}].bytes_per_step"))
    ta, tb = {t.tier: t for t in a.topology.tiers}, {t.tier: t for t in b.topology.tiers}
    for tier in ta:
        out.append(_d("topology", f"{tier}.utilisation", ta[tier].utilisation, tb[tier].utilisation, "",
                      "analyze", f"topology.tiers[{tier}].utilisation"))
    sa, sb = a.synchronisation, b.synchronisation
    for k in ("jitter_wait_s", "bubble_s", "goodput"):
        out.append(_d("synchronisation", k, getattr(sa, k), getattr(sb, k), "s" if k.endswith("_s") else "",
                      "analyze", f"synchronisation.{k}"))
    out.append(_d("synchronisation", "checkpoint_write_s", sa.failures.write_s, sb.failures.write_s, "s", "analyze",
                  "synchronisation.failures.write_s"))
    ea, eb = {e.level: e for e in a.energy.levels}, {e.level: e for e in b.energy.levels}
    for lv in ea:
        out.append(_d("energy", f"{lv}.per_token_j", ea[lv].per_token_j, eb[lv].per_token_j, "J", "analyze",
                      f"energy.levels[{lv}].per_token_j"))
    out.append(_d("verdict", f"narrowest ({a.verdict.narrowest} / {b.verdict.narrowest})", a.verdict.narrowest_s,
                  b.verdict.narrowest_s, "s", "analyze", "verdict.narrowest_s"))
    return out


def scenario_differences(a: Analysis, b: Analysis) -> list[str]:
    """What differs between the two scenarios, knob by knob."""
    sa, sb = a.prediction.scenario, b.prediction.scenario
    diffs = []
    if sa.model.name != sb.model.name:
        diffs.append(f"model {sa.model.name} -> {sb.model.name}")
    elif sa.model != sb.model:  # one name, other fields (a copy with another sequence length): name those
        diffs += [f"model.{f.name} {_fmt(getattr(sa.model, f.name))} -> {_fmt(getattr(sb.model, f.name))}"
                  for f in dataclasses.fields(sa.model) if getattr(sa.model, f.name) != getattr(sb.model, f.name)]
    if sa.system.device.name != sb.system.device.name:
        diffs.append(f"GPU {sa.system.device.name} -> {sb.system.device.name}")
    if sa.system.name != sb.system.name:
        diffs.append(f"system {sa.system.name} -> {sb.system.name}")
    ta, tb = {t.name: t for t in sa.system.tiers}, {t.name: t for t in sb.system.tiers}
    for name in ta:
        if name in tb and ta[name] != tb[name]:
            for f in dataclasses.fields(ta[name]):
                va, vb = getattr(ta[name], f.name), getattr(tb[name], f.name)
                if va != vb:
                    diffs.append(f"{name}.{f.name} {_fmt(va)} -> {_fmt(vb)}")
    for f, what, unit in (("gpus_per_node", "GPUs per node", ""), ("power_limit_w", "power cap per GPU", " W"),
                          ("host_bw_bytes_per_s_per_gpu", "host link per GPU", ""),
                          ("segment_gpus", "scale-up segment", " GPUs")):
        va, vb = getattr(sa.system, f), getattr(sb.system, f)
        if va != vb:  # 0 = none (no cap; the whole domain)
            diffs.append(f"{what} {_fmt(va) + unit if va else 'none'} -> {_fmt(vb) + unit if vb else 'none'}")
    if sa.num_gpus != sb.num_gpus:
        diffs.append(f"GPUs {sa.num_gpus} -> {sb.num_gpus}")
    for f in dataclasses.fields(sa.plan):
        va, vb = getattr(sa.plan, f.name), getattr(sb.plan, f.name)
        if va != vb:
            diffs.append(f"{f.name} {_fmt(va)} -> {_fmt(vb)}")
    ca, cb = a.prediction.calibration, b.prediction.calibration
    if ca != cb:  # the profile each side was priced with (a scenario's `calibration`, or --profile)
        diffs.append(f"calibration profile {ca.name} -> {cb.name}" if ca.name != cb.name else
                     f"calibration profile {ca.name} (its constants differ)")
    if a.prediction.attention_kernel != b.prediction.attention_kernel:
        diffs.append(f"attention kernel {a.prediction.attention_kernel} -> {b.prediction.attention_kernel}")
    return diffs


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v / 1e9:g} GB/s" if v >= 1e8 else f"{v:g}"
    if isinstance(v, tuple):
        return ",".join(map(str, v))
    return str(v)


def _signed(x: float, unit: str = "s") -> str:
    return f"{'+' if x >= 0 else '-'}{abs(x):.3g} {unit}"


def _tiers(an: Analysis, name: str) -> tuple[str, ...]:
    for r in an.collectives:
        if r.name == name:
            return r.tiers or (r.bottleneck_tier,)
    return ()


def _ops(rows) -> str:
    words = list(dict.fromkeys("activation offload copies (host link)" if r.axis == "host"
                               else OP_WORDS.get(r.kind, r.kind) for r in rows))
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def comm_sentences(a: Analysis, b: Analysis, key: str) -> list[str]:
    """Why one exposed-communication bucket moved: its patterns grouped by cause — the tiers they cross changed,
    the time of one message changed (same count and size: faster or slower links), the count or size changed,
    or how much of them hides behind compute changed."""
    axes = BUCKET_AXES[key]
    ra = {r.name: r for r in a.collectives if r.axis in axes}
    rb = {r.name: r for r in b.collectives if r.axis in axes}
    groups: dict[tuple, list] = {}
    for name in dict.fromkeys(list(ra) + list(rb)):
        x, y = ra.get(name), rb.get(name)
        d = (y.critical_path_s if y else 0.0) - (x.critical_path_s if x else 0.0)
        if abs(d) < 1e-4:
            continue
        if x is None or y is None:
            cause = ("appear" if x is None else "disappear",)
        elif _tiers(a, name) != _tiers(b, name):
            cause = ("tiers", _tiers(a, name), _tiers(b, name))
        elif (x.count_per_step, x.max_message_bytes) == (y.count_per_step, y.max_message_bytes) and \
                abs(y.time_each_s - x.time_each_s) > 1e-3 * x.time_each_s:
            cause = ("speed",)
        elif (x.count_per_step, x.max_message_bytes) != (y.count_per_step, y.max_message_bytes):
            cause = ("size",)
        else:
            cause = ("overlap",)
        groups.setdefault(cause, []).append((x, y, d))
    out = []
    if ("appear",) in groups and ("disappear",) in groups:  # one pattern set replaced by another (e.g. SP off)
        gone, new = groups.pop(("disappear",)), groups.pop(("appear",))
        rows_a, rows_b = [i[0] for i in gone], [i[1] for i in new]
        d = sum(i[2] for i in gone + new)
        out.append(f"{rows_a[0].name.split('.')[0].upper()} {_ops(rows_a)} in A are replaced by {_ops(rows_b)} in B: "
                   f"{_signed(d)} exposed.")
    for cause, items in groups.items():
        d = sum(i[2] for i in items)
        rows = [i[1] or i[0] for i in items]
        what = _ops(rows) if rows[0].axis == "host" else f"{rows[0].name.split('.')[0].upper()} {_ops(rows)}"
        if cause[0] in ("appear", "disappear"):
            out.append(f"{what} {cause[0]} in B: {_signed(d)} exposed.")
        elif cause[0] == "tiers":
            out.append(f"{what} moved from {' + '.join(TIER_WORDS.get(t, t) for t in cause[1])} to "
                       f"{' + '.join(TIER_WORDS.get(t, t) for t in cause[2])}: {_signed(d)} exposed.")
        elif cause[0] == "speed":
            x, y, _ = max(items, key=lambda i: abs(i[2]))
            out.append(f"{what}: {x.time_each_s * 1e3:.3g} -> {y.time_each_s * 1e3:.3g} ms per "
                       f"{x.max_message_bytes / 1e6:.3g} MB message (same count and size; "
                       f"{'faster' if y.time_each_s < x.time_each_s else 'slower'} links): {_signed(d)} exposed.")
        elif cause[0] == "size":
            x, y, _ = max(items, key=lambda i: abs(i[2]))
            out.append(f"{what}: {x.count_per_step:g} x {x.max_message_bytes / 1e6:.3g} MB -> {y.count_per_step:g} x "
                       f"{y.max_message_bytes / 1e6:.3g} MB per step ({x.name}"
                       f"{f' and {len(items) - 1} more' if len(items) > 1 else ''}): {_signed(d)} exposed.")
        else:
            hx = sum(i[0].total_s - i[0].critical_path_s for i in items)
            hy = sum(i[1].total_s - i[1].critical_path_s for i in items)
            out.append(f"{what}: {hx:.3g} -> {hy:.3g} s hidden behind compute: {_signed(d)} exposed.")
    return out


def component_sentence(a: Analysis, b: Analysis, key: str) -> list[str]:
    pa, pb = a.prediction, b.prediction
    d = pb.breakdown_s[key] - pa.breakdown_s[key]
    if key in BUCKET_AXES:
        found = comm_sentences(a, b, key)
        return found or [f"{component_label(b.context, key)}: {_signed(d)}."]
    if key == "compute":
        fa = pa.hardware_flop_per_step / pa.scenario.num_gpus
        fb = pb.hardware_flop_per_step / pb.scenario.num_gpus
        # the rate over the GPU's own compute time: a wait for the host is said apart
        ga, gb = pa.breakdown_s["compute"] - pa.host_wait_s, pb.breakdown_s["compute"] - pb.host_wait_s
        ra, rb = fa / ga if ga > 0 else 0.0, fb / gb if gb > 0 else 0.0
        host = (f"; the GPU waits for its host {pa.host_wait_s:.3g} -> {pb.host_wait_s:.3g} s of it (kernels issued "
                "one by one, host synchronisations)" if max(pa.host_wait_s, pb.host_wait_s) > 0 else "")
        return [f"Compute {_signed(d)}: {fa / 1e15:.3g} -> {fb / 1e15:.3g} PFLOP executed per GPU per step at "
                f"{ra / 1e12:.0f} -> {rb / 1e12:.0f} TFLOP/s while computing "
                f"({pa.scenario.system.device.name} {pa.scenario.plan.precision} -> "
                f"{pb.scenario.system.device.name} {pb.scenario.plan.precision}; the rate includes memory-bound "
                f"kernels and the slowdown of overlapped communication){host}{split_clause(pa, pb)}."]
    if key == "bubble":
        qa, qb = pa.scenario.plan, pb.scenario.plan
        return [f"Pipeline bubble {_signed(d)}: pp {qa.pp} -> {qb.pp}, vpp {qa.vpp} -> {qb.vpp}, "
                f"{pa.workload.num_microbatches} -> {pb.workload.num_microbatches} micro-batches per step."]
    return [f"{component_label(b.context, key).capitalize()} {_signed(d)}."]


def split_clause(pa, pb) -> str:
    """Where the two pipelines split their layers differently at the same depth: the split and the slowest stage's
    share of the layers, since the step's compute is paced by that stage (a rate over the average GPU's work would
    otherwise take the change)."""
    la, lb = [s.layers for s in pa.stages], [s.layers for s in pb.stages]
    if la == lb or len(la) != len(lb) or len(la) < 2:
        return ""
    slow_a = max(pa.stages, key=lambda s: s.total_s)
    slow_b = max(pb.stages, key=lambda s: s.total_s)
    return (f"; the layers are split {stage_layer_text(la)} -> {stage_layer_text(lb)} over the pipeline "
            f"(first/middle/last stage), and the slowest stage, whose pace the pipeline keeps, holds "
            f"{slow_a.layers} -> {slow_b.layers} layers")


def critical_rank_sentence(a: Analysis, b: Analysis) -> list[str]:
    """Where A and B pipeline the same depth but a different rank paces it (the accounts are the critical rank's:
    analysis.context), the change of rank, which moves the compute, traffic and rate rows with it — a what-if that
    shortens one rank's exchange can hand the pace to a rank with more layers or the output layer."""
    pa, pb = a.prediction, b.prediction
    ca, cb = a.context.critical_stage, b.context.critical_stage
    if pa.scenario.plan.pp < 2 or pa.scenario.plan.pp != pb.scenario.plan.pp or ca == cb:
        return []

    def held(an: Analysis, r: int) -> str:
        st = [s for s, _ in rank_stages(an.prediction, r)]
        return f"stage {st[0]}" if len(st) == 1 else "stages " + " and ".join(map(str, st))
    return [f"The critical pipeline rank moves from rank {ca} ({held(a, ca)}) to rank {cb} ({held(b, cb)}): the "
            "compute, traffic and rates below are each side's critical rank's, so part of their change is the change "
            "of rank, not of the work."]


def compare(a: Analysis, b: Analysis) -> Comparison:
    """Compare analysis `b` against `a` (module docstring)."""
    pa, pb = a.prediction, b.prediction
    sentences = []
    diffs = scenario_differences(a, b)
    sentences.append("B differs from A in: " + ("; ".join(diffs) if diffs else "nothing (same scenario)") + ".")
    d = pb.step_time_s - pa.step_time_s
    sentences.append(f"Step {pa.step_time_s:.4g} s -> {pb.step_time_s:.4g} s ({_signed(d)}, "
                     f"{d / pa.step_time_s:+.1%}); tokens/s {pa.tokens_per_s:,.0f} -> {pb.tokens_per_s:,.0f}.")
    scale = max(pa.step_time_s, pb.step_time_s)
    floor = max(1e-4 * scale, min(SIGNIFICANT * scale, 0.25 * abs(d)))
    moved = sorted((k for k in BREAKDOWN_KEYS if abs(pb.breakdown_s[k] - pa.breakdown_s[k]) > floor),
                   key=lambda k: -abs(pb.breakdown_s[k] - pa.breakdown_s[k]))
    sentences += critical_rank_sentence(a, b)
    for k in moved:
        sentences += component_sentence(a, b, k)
    ma, mb = pa.memory, pb.memory
    if abs(mb.total_bytes - ma.total_bytes) > 0.01 * ma.capacity_bytes or ma.fits != mb.fits:
        sentences.append(f"Memory per GPU {ma.total_bytes / 1e9:.1f} -> {mb.total_bytes / 1e9:.1f} GB of "
                         f"{mb.capacity_bytes / 1e9:.1f} GB ({'fits' if mb.fits else 'does NOT fit'} in B).")
    fa = {e.level: e for e in a.energy.levels}.get("facility")
    fb = {e.level: e for e in b.energy.levels}.get("facility")
    if fa and fb:
        sentences.append(f"Energy per token at the facility {fa.per_token_j:.3g} -> {fb.per_token_j:.3g} J "
                         f"({(fb.per_token_j - fa.per_token_j) / fa.per_token_j:+.1%}).")
    if a.verdict.narrowest != b.verdict.narrowest:
        sentences.append(f"The narrowest path moves from {component_label(a.context, a.verdict.narrowest)} to "
                         f"{component_label(b.context, b.verdict.narrowest)}.")
    return Comparison(a, b, tuple(prediction_deltas(a, b) + analysis_deltas(a, b)), tuple(sentences))
