"""From the fifty-first session's review of disaggregated serving: what-ifs and the serving search on a deployment
whose prefill pool has a layout of its own."""
from __future__ import annotations

from narrowpath.cli.main import main

SERVE = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "1", "--rate", "10", "--output-len", "128",
         "--num-requests", "200"]


def test_more_tp_of_a_prefill_pool_of_its_own_runs(capsys):
    """1 prefill instance of tp 2 + 3 decode instances of tp 1: the "more TP" what-if halved 1 prefill instance to 0
    and kept prefill_tp 2, so `serve` exited 2 ("plan.prefill_tp: lays out prefill-only instances: give
    prefill_replicas > 0") where --no-whatif ran. Now it doubles both tps on the same instance counts (both odd):
    3 · 2 + 1 · 4 = 10 GPUs."""
    rc = main([*SERVE, "--replicas", "4", "--prefill-replicas", "1", "--prefill-tp", "2", "--input-len", "1024"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    line, = [ln for ln in out.out.splitlines() if ln.strip().startswith("more TP")]
    assert "tp 1 → 2, prefill tp 2 → 4 (10 GPUs)" in line
