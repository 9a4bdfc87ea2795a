"""The parts the search prices once and reuses key on everything their functions read: a part computed for a plan
equals the part computed for that plan with every other knob taken from another plan of the space. When the physics
starts reading a new knob (workload/*, cost/*), this fails and names the part whose key must grow (search/bulk.py,
search/exact.py, search/parts.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import load_scenario
from narrowpath.cost.memory import layer_activation_bytes
from narrowpath.errors import SpecError
from narrowpath.search.parts import Parts
from narrowpath.search.space import SearchSpace
from narrowpath.search.table import build_table
from narrowpath.workload import build as B
from narrowpath.workload import transformer as T
from tests.search.scenarios import llama3_8b_fp8, mixtral16

_STAGE = ("tp", "cp", "mbs", "sequence_parallel", "ep", "etp")


def _no_rc(scn):
    p = scn.plan
    return dataclasses.replace(scn, plan=dataclasses.replace(
        p, recompute="selective" if p.recompute == "selective" else "none", recompute_layers=0))


_RC = ("recompute", "recompute_modules", "recompute_layers", "offload_layers")
"""The activation strategy, its selectively recomputed modules included (search.space.activation_strategies: the
base plan's and schedule.choose.module_patches'; every key of search/bulk.py and search/exact.py that reads the
recompute holds the mode and module set, `Bulk.rck` / `Bulk.sel`): a key without the modules fails here for the
layer ops, transfers, ends (MTP) and activations."""
# part -> (function of (scenario, kind, kernel), plan fields its key is made of (search/bulk.py, search/exact.py))
PARTS = {
    # an MoE layer's permutations read the dispatch (workload.moe.permute_traffic): a structural row's block holds one
    "layer ops": (lambda s, k, kern: B.layer_ops(s, kern, *k), _STAGE + _RC + ("zero_stage", "ep_dispatch")),
    "layer comm": (lambda s, k, kern: B.layer_comm(s, kern, k[0]),
                   _STAGE + _RC + ("tp_comm_overlap", "cp_comm", "ep_overlap", "ep_dispatch", "dp", "pp",
                                   "placement")),
    "layer ZeRO": (lambda s, k, kern: B.layer_zero_transfers(s.model, s.plan, k[0]),
                   ("tp", "cp", "dp", "mbs", "ep", "etp", "zero_stage", "dp_overlap")),
    # the ends' transfers of an MTP model include its blocks' layer exchange, keyed as the layer comm is
    # (search/exact.py: comm_key); without MTP the embedding and output layer's own (tp, cp, sp, mbs)
    "ends": (lambda s, k, kern: (B._embedding_work(s, True, True)[0], B._embedding_work(s, False, True)[0],
                                 B.embedding_params(s, True, False), B.mtp_params(s) if s.model.mtp_layers else 0,
                                 () if s.model.mtp_layers else B._embedding_work(s, True, True)[1],
                                 () if s.model.mtp_layers else B._embedding_work(s, False, True)[1]),
             _STAGE + _RC + ("pp", "vpp", "ep_dispatch")),
    "ends comm": (lambda s, k, kern: (B._embedding_work(s, True, True)[1], B._embedding_work(s, False, True)[1]),
                  _STAGE + _RC + ("tp_comm_overlap", "cp_comm", "ep_overlap", "ep_dispatch", "dp", "pp",
                                  "placement")),
    "activations": (lambda s, k, kern: layer_activation_bytes(_no_rc(s), kern, moe_layer=k[0], window=k[1]),
                    _STAGE + _RC),
    "step transfers": (lambda s, k, kern: B.step_transfers(s, 1.5e9, 0.5e9),
                       ("zero_stage", "dp_overlap", "tp", "cp", "dp", "ep", "etp", "pp", "vpp")),
    "optimizer": (lambda s, k, kern: B.optimizer_ops(s.plan, 1.5e9, 0.5e9),
                  ("zero_stage", "tp", "cp", "dp", "ep", "etp")),
    "layer parameters": (lambda s, k, kern: (T.layer_params(s.model, s.plan, moe_layer=k[0]),
                                             T.layer_expert_params(s.model, s.plan)), ("tp", "ep", "etp")),
}




_TABLES: dict = {}


def _space_of(make):
    """(scenario, its full-space table, attention kernel), built once per scenario for the module."""
    if make not in _TABLES:
        scn = make()
        table = build_table(SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan))
        _TABLES[make] = (scn, table, Parts(scn, None).kernel)
    return _TABLES[make]


@pytest.mark.parametrize("make", [lambda: load_scenario("llama3-8b-h100-8"), llama3_8b_fp8, mixtral16,
                                  lambda: load_scenario("deepseek-v3-h800-2048")],
                         ids=["llama3-8b", "fp8", "mixtral", "deepseek-v3"])
@pytest.mark.parametrize("part", list(PARTS))
def test_a_part_reads_only_its_key(make, part):
    scn, table, kern = _space_of(make)
    fn, key_fields = PARTS[part]
    rng = np.random.default_rng(11)
    picks = rng.choice(len(table), size=400, replace=False)
    checked = 0
    modules: set = set()
    for a, b in zip(picks[::2], picks[1::2]):
        p, q = table.plan(int(a)), table.plan(int(b))
        try:  # q with p's key knobs: every other knob differs as it may
            other = dataclasses.replace(q, **{f: getattr(p, f) for f in key_fields})
            s_other = dataclasses.replace(scn, plan=other, num_gpus=other.num_gpus, open_knobs=(), chosen=())
        except SpecError:
            continue
        s_p = dataclasses.replace(scn, plan=p, open_knobs=(), chosen=())
        for kind in sorted(B.layer_kinds(scn.model)):
            assert fn(s_p, kind, kern) == fn(s_other, kind, kern), (part, p, other)
        checked += 1
        modules.add(p.recompute_modules)
        if checked >= 25:
            break
    assert checked >= 5, f"only {checked} pairs checked for {part}"
    if scn.model.moe is not None:  # the pairs held module sets against the others
        assert len(modules) >= 3, modules
