"""What-ifs that say everything they change (fifty-sixth session's review of the training what-ifs)."""
from __future__ import annotations

import dataclasses

from narrowpath.analysis.analyze import analyze
from narrowpath.analysis.remedies import system_changes
from narrowpath.catalog import load_scenario, system


def test_the_next_generation_names_what_its_catalog_box_changes_besides_the_gpu():
    """DGX B200 -> DGX B300 also doubles the NIC (400 -> 800 Gb/s): a DeepSeek-V3 B200 run's 'next generation'
    gained 21.9 %, all of it from the NIC (the B300 at 400 Gb/s priced the base to the last digit)."""
    assert system_changes(system("dgx-b200"), system("dgx-b300")) == ["NIC 400 -> 800 Gb/s per GPU"]
    assert system_changes(system("dgx-h100"), system("dgx-h100")) == []
    capped = dataclasses.replace(system("dgx-h100"), power_limit_w=450.0)
    assert "power cap 450 W -> none" in system_changes(capped, system("dgx-b200"))


def test_a_plan_that_does_not_fit_is_told_which_change_makes_it_fit():
    """GPT-3 175B on 1,024 A100 without recompute needs 127 GB of 86: the verdict said the remedies for its HBM-bound
    kernels 'do not shrink it' though three of them do (they do not fit either), and never that a full recompute —
    listed as 'slower' against a plan that cannot run — is what makes it fit."""
    scn = load_scenario("gpt3-175b-a100-1024")
    a = analyze(dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, recompute="none")))
    s = a.verdict.sentence
    assert "do not shrink it" not in s and "that shrink it do not fit in memory" in s
    assert "recompute none -> full makes the plan fit" in s


def test_moving_cp_into_the_domain_says_it_pushes_tp_out():
    """Llama-3 70B on 256 H100 with tp 4, cp 4: CP first keeps CP inside a node and sends TP groups across nodes
    (the step 18.9 -> 23.4 s); the label said only that CP moved."""
    scn = load_scenario("llama3-70b-h100-256")
    p = dataclasses.replace(scn.plan, tp=4, cp=4, pp=4, dp=4, vpp=5)
    a = analyze(dataclasses.replace(scn, plan=p))
    cp = next(w for w in a.verdict.what_ifs if w.change == "cp_in_scale_up")
    assert cp.description == "place CP groups inside the scale-up domain (TP groups then cross it)"
