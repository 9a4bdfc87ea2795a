"""The cases of the predict golden test and the snapshot of a prediction it compares.

Cases: every catalog scenario, every case of the shipped training corpora that builds, and a fixed set of plan
variants of six scenarios that turn the knobs the search varies (cp exchange, ZeRO stages, partial recompute,
activation offload, overlap switches, bucket size, placement order, expert layout and dispatch, low precision).
The variants were drawn once with a seeded generator (`draw_variants`) and are stored as plan fields in the golden
file, so the file alone defines the cases.

Regenerate the golden file ONLY from an unmodified `predict` (e.g. from main after the lead changed the physics):
    PYTHONPATH=<main checkout>/src python tests/schedule/golden/predict_cases.py
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

GOLDEN = Path(__file__).with_name("predict_golden.json")
VARIANT_SCENARIOS = ("llama3-8b-h100-8", "llama3-70b-h100-256", "gpt3-175b-a100-1024", "deepseek-v3-h800-2048",
                     "llama3-405b-h100-16k", "mixtral-8x7b-h100-64")
PLACEMENTS = (("tp", "cp", "ep", "dp", "pp"), ("tp", "cp", "ep", "pp", "dp"), ("tp", "dp", "cp", "ep", "pp"),
              ("tp", "pp", "cp", "ep", "dp"))


def base_scenario(name: str):
    from narrowpath.catalog import load_scenario, model, system
    from narrowpath.spec import Plan, Scenario
    if name == "mixtral-8x7b-h100-64":
        plan = Plan(tp=2, pp=1, dp=32, ep=8, mbs=1, gbs=256, zero_stage=1, sequence_parallel=True)
        return Scenario(name=name, system=system("dgx-h100"), model=model("mixtral-8x7b"), plan=plan, num_gpus=64)
    return load_scenario(name)


def plan_fields(plan) -> dict:
    return {f.name: (list(v) if isinstance(v := getattr(plan, f.name), tuple) else v)
            for f in dataclasses.fields(plan)}


def plan_from_fields(fields: dict):
    from narrowpath.spec import Plan
    return Plan(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in fields.items()})


def draw_variants(per_scenario: int = 40, seed: int = 15) -> list[tuple[str, dict]]:
    """(scenario name, plan fields) of consistent variants drawn with a seeded generator."""
    import numpy as np
    from narrowpath.search.space import divisors
    from narrowpath.spec.scenario import consistency_errors
    rng = np.random.default_rng(seed)
    out = []
    for name in VARIANT_SCENARIOS:
        scn = base_scenario(name)
        m, n, gbs = scn.model, scn.num_gpus, scn.plan.gbs
        found, tries = 0, 0
        while found < per_scenario and tries < 20000:
            tries += 1
            pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
            tp = pick([d for d in divisors(n) if d <= scn.system.scale_up_domain])
            pp = pick([d for d in divisors(n // tp) if d <= m.layers])
            cp = pick([d for d in divisors(n // (tp * pp)) if d <= 8 and m.seq_len % d == 0])
            dp = n // (tp * pp * cp)
            mbs = pick([d for d in (1, 2, 4, 8) if gbs % (dp * d) == 0] or [0])
            if not mbs:
                continue
            vpp = pick([1, 1, 2, 3, 4, 8, 16]) if pp > 1 else 1
            recompute = pick(["none", "selective", "full", "full"])
            per_chunk = max(1, -(-m.layers // (pp * vpp)))
            kw = dict(tp=tp, pp=pp, cp=cp, dp=dp, mbs=mbs, vpp=vpp, recompute=recompute,
                      recompute_layers=int(rng.integers(1, per_chunk + 1)) if recompute == "full" and rng.random() < .5
                      else 0,
                      offload_layers=int(rng.integers(1, per_chunk + 1)) if recompute != "full" and rng.random() < .3
                      else 0,
                      zero_stage=pick([0, 1, 2, 3]) if dp * cp > 1 else 0,
                      sequence_parallel=tp > 1 and rng.random() < .8,
                      dp_overlap=bool(rng.random() < .5), tp_comm_overlap=bool(rng.random() < .5),
                      cp_comm=pick(["p2p", "all_gather", "a2a"]), bucket_bytes=pick([10e6, 40e6, 160e6]),
                      placement=pick(PLACEMENTS))
            if m.moe is not None:
                kw.update(ep=pick([d for d in divisors(m.moe.num_experts) if d <= 64]),
                          etp=pick([0, 1, 2]), ep_overlap=bool(rng.random() < .5),
                          ep_dispatch=pick(["all_to_all", "dedup"]))
            if scn.system.device.name.startswith("H") and rng.random() < .25:
                kw["precision"] = "fp8"
            try:
                plan = dataclasses.replace(scn.plan, **kw)
            except Exception:
                continue
            if consistency_errors(m, plan, n, scn.system):
                continue
            out.append((name, plan_fields(plan)))
            found += 1
    return out


def cases(variants: list[tuple[str, dict]]):
    """(case id, scenario, calibration) of every golden case."""
    from narrowpath.catalog import load_scenario, scenario_ids
    from narrowpath.validate.corpus import load_corpus
    for sid in scenario_ids():
        yield f"catalog:{sid}", load_scenario(sid)
    for case in load_corpus():
        if case.scenario is not None:
            yield f"corpus:{case.corpus}:{case.id}", case.scenario
    bases = {}
    for i, (name, fields) in enumerate(variants):
        if name not in bases:
            bases[name] = base_scenario(name)
        yield f"variant:{i}:{name}", dataclasses.replace(bases[name], plan=plan_from_fields(fields))


def snapshot(pred) -> dict:
    """Every number and word of a prediction a user or a later stage reads."""
    return {
        "attention_kernel": pred.attention_kernel, "step_time_s": pred.step_time_s, "breakdown_s": pred.breakdown_s,
        "stages": [[s.index, s.layers, s.fwd_compute_s, s.bwd_compute_s, s.exposed_comm_s, s.host_wait_s]
                   for s in pred.stages],
        "transfers": [[t.name, t.op, t.axis, t.message_bytes, t.count, t.time_each_s, t.total_s, t.exposed_s, t.tier,
                       t.algorithm, t.group_size, t.phase] for t in pred.transfers],
        "flop": [pred.model_flop_per_step, pred.hardware_flop_per_step], "mfu": pred.mfu, "hfu": pred.hfu,
        "tokens_per_s": pred.tokens_per_s,
        "memory": [[m.stage, m.items, m.capacity_bytes] for m in pred.memory_by_stage],
        "memory_stage": pred.memory.stage, "assumptions": list(pred.assumptions),
        "chosen_plan": plan_fields(pred.scenario.plan),
    }


def fingerprint(snap: dict) -> str:
    """SHA-256 of the snapshot as JSON (floats written exactly, keys in the order the code builds them)."""
    return hashlib.sha256(json.dumps(snap, separators=(",", ":")).encode()).hexdigest()


def predict_record(scn) -> dict:
    """What the golden file keeps of a case: the fingerprint of its whole snapshot, and the step time and memory
    (or the error) to say what moved when the fingerprint differs."""
    from narrowpath.errors import NarrowpathError
    from narrowpath.schedule.step import predict
    try:
        pred = predict(scn)
    except NarrowpathError as exc:
        return {"error": str(exc)}
    return {"sha256": fingerprint(snapshot(pred)), "step_time_s": pred.step_time_s,
            "memory_bytes": pred.memory.total_bytes}


def main() -> int:
    variants = draw_variants()
    out = {"variants": variants, "cases": {}}
    for cid, scn in cases(variants):
        out["cases"][cid] = predict_record(scn)
    rows = [json.dumps(v) for v in out["variants"]]
    cases_ = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in out["cases"].items()]
    GOLDEN.write_text('{"variants": [\n' + ",\n".join(rows) + '],\n"cases": {\n' + ",\n".join(cases_) + "}}\n")
    print(f"wrote {GOLDEN} ({len(out['cases'])} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
