"""Without noise the simulated step equals `predict` within 1 % on every case of every validation corpus (the
simulator plays the exact schedule; the closed form follows it, schedule/pipeline.py). Cases that do not build
are reported as skipped with their reason, never dropped."""
from __future__ import annotations

from pathlib import Path

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.catalog.store import scenario_ids
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.sim import simulate
from narrowpath.validate.corpus import load_corpus

ROOT = Path(__file__).resolve().parents[3]
CORPORA = [ROOT.parent / "shared" / "validation" / "training-public.yaml",
           ROOT.parent / "shared" / "validation" / "training-sweeps-public.yaml",
           ROOT / "benchmarks" / "data" / "published-extra.yaml"]


def _cases():
    out = [pytest.param(None, "shipped", c, id=f"shipped:{c.id}") for c in load_corpus()]
    for path in CORPORA:
        if not path.exists():
            out.append(pytest.param(path, "missing", None, id=f"{path.name}:missing"))
            continue
        for c in load_corpus(path):
            out.append(pytest.param(path, path.name, c, id=f"{path.name}:{c.id}"))
    return out


@pytest.mark.parametrize("path,label,case", _cases())
def test_noise_free_simulation_equals_predict(path, label, case):
    if case is None:
        pytest.skip(f"corpus {path} is not present in this checkout")
    if case.scenario is None:
        pytest.skip(f"case does not build: {case.error}")
    try:
        r = simulate(case.scenario, steps=1)
    except NarrowpathError as exc:
        pytest.skip(f"predict refuses the case: {exc}")
    assert r.noise_free_step_time_s == pytest.approx(r.closed_form_step_time_s, rel=0.01), \
        f"{case.id}: simulated {r.noise_free_step_time_s:.4f} s vs closed form {r.closed_form_step_time_s:.4f} s"


@pytest.mark.parametrize("name", scenario_ids())
def test_catalog_scenarios_agree_or_differ_for_a_stated_reason(name):
    """Catalog scenarios agree within 1 %, except an interleaved plan with an uneven layer split (Llama 3 405B:
    126 layers in 16 x 7 chunks, some of two layers): its chunks differ and the closed form, fed stage totals only,
    cannot see it (docs/simulate.md). The simulator is slower there: the schedule does not pack unequal chunks."""
    scn = load_scenario(name)
    r = simulate(scn, steps=1)
    chunks = scn.plan.pp * scn.plan.vpp
    uneven = scn.plan.vpp > 1 and scn.model.layers % chunks != 0
    if uneven:
        assert r.noise_free_step_time_s > r.closed_form_step_time_s * 1.01
    else:
        assert r.noise_free_step_time_s == pytest.approx(r.closed_form_step_time_s, rel=0.01)
