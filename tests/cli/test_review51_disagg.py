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


def test_search_from_a_file_with_a_prefill_pool_of_its_own_lays_out_its_own_pools(tmp_path, capsys):
    """A serving file of 1 prefill instance of tp 2 + 2 decode instances of tp 1 (4 GPUs), which `serve` runs: the
    search kept the file's prefill_tp on every plan it built, so its first colocated plan (prefill_replicas 0) was
    refused and the search exited 2 ("plan.prefill_tp: lays out prefill-only instances"). The search lays out its own
    pools: at tp 1 and batch 16 on 4 GPUs, 3 colocated plans (pp 1, 2, 4), 3 with prefill instances of the decode
    layout (1 + 3 and 2 + 2 at pp 1, 1 + 1 at pp 2) and 2 paired with a prefill layout of their own (the --tp pin
    holds both pools at tp 1), the file's prefill tp 2 dropped."""
    f = tmp_path / "s1.yaml"
    f.write_text("system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 4\n"
                 "plan: {tp: 1, replicas: 3, prefill_replicas: 1, prefill_tp: 2}\n"
                 "workload: {scenario: server, request_rate_per_s: 5, input_tokens: 1024, output_tokens: 128, "
                 "num_requests: 50}\n")
    assert main(["serve", str(f), "--no-whatif"]) == 0
    capsys.readouterr()
    rc = main(["search", "--serve", str(f), "--gpus", "4", "--slo-ttft", "1", "--slo-tpot", "0.05", "--max-batch",
               "16", "--tp", "1", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    import json
    ranked = json.loads(out.out)["ranked"]
    assert ranked and all(r["plan"]["prefill_tp"] in (0, 1) for r in ranked)
    assert len(ranked) == 8 and sorted(r["plan"]["prefill_replicas"] for r in ranked) == [0, 0, 0, 1, 1, 1, 2, 2]


def _whatif_rows(capsys, argv) -> tuple[list[str], list[str]]:
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    return ([ln for ln in lines if ln.strip().startswith("larger scale-up domain")],
            [ln for ln in lines if "not run: larger scale-up domain" in ln])


def test_the_larger_domain_what_if_runs_where_a_hand_off_crosses_scale_out(capsys):
    """Three tp-1 decode instances and one tp-8 prefill instance on 8-GPU domains: 8 + 1 GPUs do not fit one domain,
    so every hand-off is priced over scale-out (a 4,096-token prompt: 11.44 ms), but the what-if tested 2 × the
    decode instance (2 ≤ 8) and said "not run: … already stays in one scale-up domain". It now reads the pricing's
    rule (schedule.serving_place): it runs, on a domain of 72. Likewise one tp-4 prefill + three tp-4 decode
    instances on 16 GPUs, 2 of 3 hand-offs over scale-out (2 × 4 ≤ 8 skipped it too)."""
    for pools in (["--replicas", "3", "--prefill-replicas", "1", "--prefill-tp", "8"],
                  ["--tp", "4", "--replicas", "4", "--prefill-replicas", "1"]):
        argv = [*SERVE, *pools, "--input-len", "4096", "--num-requests", "50"]
        ran, skipped = _whatif_rows(capsys, argv)
        assert len(ran) == 1 and "scale-up domain 8 → 72 GPUs" in ran[0] and not skipped
    ran, skipped = _whatif_rows(capsys, [*SERVE, "--replicas", "2", "--prefill-replicas", "1", "--input-len", "4096",
                                         "--num-requests", "50"])
    assert not ran and len(skipped) == 1  # 1 + 1 one-GPU instances: one domain
