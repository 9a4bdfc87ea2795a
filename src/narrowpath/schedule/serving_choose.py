"""Choose the layout knobs a serving source did not publish (tp, pp, ep): the candidate that serves the load
fastest, by the same simulation on a shortened run — never by a measurement (as schedule.choose does for
training knobs)."""
from __future__ import annotations

import dataclasses

from narrowpath.errors import NarrowpathError, SpecError
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.serving import ServingScenario, serving_consistency


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layout_candidates(scn: ServingScenario, open_knobs: tuple[str, ...]) -> list:
    """Consistent plans varying the open knobs over the divisors that keep the GPU count."""
    p, m = scn.plan, scn.model
    out = []
    # tp and pp share the instance's GPUs over its dp ranks: any tp dividing them (the product is checked below)
    tps = _divisors(p.instance_gpus // p.dp) if "tp" in open_knobs else [p.tp]
    for tp in tps:
        pps = _divisors(p.instance_gpus // (tp * p.dp)) if "pp" in open_knobs else [p.pp]
        for pp in pps:
            if tp * p.dp * pp != p.instance_gpus:
                continue
            eps = _divisors(tp * p.dp) if "ep" in open_knobs else [p.ep]
            for ep in eps:
                plan = dataclasses.replace(p, tp=tp, pp=pp, ep=ep)
                if not serving_consistency(m, plan, scn.num_gpus, scn.system):
                    out.append(plan)
    return out


def choose_layout(scn: ServingScenario, open_knobs: tuple[str, ...], calibration: Calibration | None = None
                  ) -> ServingScenario:
    """The scenario with its open layout knobs set to the fastest candidate (output tokens/s of a run of at most
    512 requests of the same load), each choice noted."""
    from narrowpath.schedule.serving_run import simulate
    rest = tuple(k for k in open_knobs if k not in ("tp", "pp", "ep"))
    load = scn.load
    if load.arrival != "trace" and load.total_requests > 512:
        load = dataclasses.replace(load, num_requests=512, concurrency=min(load.concurrency, 512))
    best, best_tput, first_err = None, -1.0, None
    for plan in layout_candidates(scn, open_knobs):
        trial = dataclasses.replace(scn, plan=plan, load=load)
        try:
            tput = simulate(trial, rest, calibration, log_lane=False).result.output_tokens_per_s
        except NarrowpathError as exc:
            first_err = first_err or str(exc)
            continue
        if tput > best_tput:
            best, best_tput = plan, tput
    if best is None:
        knobs = ", ".join(k for k in open_knobs if k in ("tp", "pp", "ep"))
        raise SpecError(f"plan.{knobs.split(',')[0]}", f"no value of the unpublished {knobs} serves this load"
                        + (f" ({first_err})" if first_err else ""))
    notes = list(scn.chosen) + [(k, f"{getattr(best, k)} — fastest of the consistent values for this load "
                                 "(not published)") for k in ("tp", "pp", "ep") if k in open_knobs]
    return dataclasses.replace(scn, plan=best, chosen=tuple(notes))
