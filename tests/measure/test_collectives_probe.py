"""The collectives probe runs real gloo ranks (2 and 4) and reports nccl-tests-convention numbers."""
from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from narrowpath.measure.busbw import bus_factor  # noqa: E402
from narrowpath.measure.collectives_probe import probe_collectives  # noqa: E402
from narrowpath.errors import NarrowpathError  # noqa: E402


@pytest.mark.parametrize("num_ranks", [2, 4])
def test_gloo_ranks(num_ranks):
    r = probe_collectives(num_ranks=num_ranks, quick=True, max_bytes=65536, progress=False)
    assert r["backend"] == "gloo" and r["num_ranks"] == num_ranks and r["tier"] == "scale_up"
    assert {s["op"] for s in r["samples"]} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                               "send_recv"}
    for s in r["samples"]:
        assert math.isfinite(s["time_s"]) and s["time_s"] > 0
        per_rank = s["op"] in ("all_gather", "reduce_scatter", "all_to_all")  # nccl-tests prints count/nranks
        assert s["size_bytes"] % (4 * num_ranks) == 0
        assert s["size_bytes"] == 4 * s["count"] * (num_ranks if per_rank else 1), s
        assert s["algbw_bytes_per_s"] == pytest.approx(s["size_bytes"] / s["time_s"])
        assert s["busbw_bytes_per_s"] == pytest.approx(s["algbw_bytes_per_s"] * bus_factor(s["op"], num_ranks))
    for op, f in r["fits"].items():
        assert f["alpha_s"] >= 0 and f["busbw_bytes_per_s"] > 0, op
        assert f["knee"]["busbw_bytes_per_s"] > 0 and f["knee"]["busbw_beyond_knee_bytes_per_s"] > 0, op
        for k in ("heldout_mean_rel_error", "heldout_max_rel_error", "line_heldout_mean_rel_error"):
            assert math.isfinite(f[k]) and f[k] >= 0, (op, k)
    assert all(s["passes"] == 3 and len(s["batch_times_s"]) == 3 for s in r["samples"])


def test_bad_op_and_rank_count():
    with pytest.raises(NarrowpathError, match="unknown collective"):
        probe_collectives(ops=("allreduce",))
    with pytest.raises(NarrowpathError, match="at least 2"):
        probe_collectives(num_ranks=1)


def test_runs_unchanged_under_torchrun(tmp_path):
    """Under torchrun the probe joins the launched job (no spawning); rank 0 writes the result."""
    import json
    import subprocess
    import sys
    out = tmp_path / "coll.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
           "narrowpath.cli.main", "probe", "collectives", "--quick", "--no-progress", "--ops", "all_reduce",
           "--max-bytes", "16384", "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["num_ranks"] == 2 and result["backend"] == "gloo" and result["samples"]
    assert proc.stdout.count("# Collective test starting: all_reduce_perf") == 1  # only rank 0 reports


def test_local_ranks_beyond_the_gpus(monkeypatch):
    """NCCL binds one GPU per rank: 2 local ranks on a 1-GPU machine (the project's H200) fall back to gloo when no
    backend is stated, and a stated nccl is refused naming the counts; with enough GPUs nothing changes."""
    import torch
    from narrowpath.errors import NarrowpathError
    from narrowpath.measure.collectives_probe import local_backend
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert local_backend(None, 2) == "gloo"
    assert local_backend("gloo", 2) == "gloo"
    with pytest.raises(NarrowpathError, match="2 local ranks need 2 GPUs .* this machine has 1; use --backend gloo"):
        local_backend("nccl", 2)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert local_backend(None, 8) is None and local_backend("nccl", 4) == "nccl"
    with pytest.raises(NarrowpathError, match="use --ranks 8"):
        local_backend("nccl", 16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert local_backend(None, 2) is None


def test_repeats_sets_the_passes(capsys):
    """`probe collectives --repeats N` was accepted and ignored (`--quick --repeats 9` still made 3 passes): it is
    the number of passes over every (op, size), so each sample holds one batch time per pass."""
    import json
    from narrowpath.cli.main import main
    assert main(["probe", "collectives", "--quick", "--no-progress", "--ops", "all_reduce", "--max-bytes", "16384",
                 "--repeats", "4", "--json"]) == 0
    samples = json.loads(capsys.readouterr().out)["samples"]
    assert samples and all(s["passes"] == 4 and len(s["batch_times_s"]) == 4 for s in samples)


def test_nccl_tests_count_column():
    """nccl-tests prints nbytes / wordSize with paramcount = count / nranks for all_gather, reduce_scatter and
    all_to_all: 4,096 B of float over 2 ranks is count 512 there (the probe printed 1024), 1024 for all_reduce and
    send_recv; `collective` and the probe share the one definition."""
    from narrowpath.measure.busbw import nccl_tests_count
    assert [nccl_tests_count(op, 4096, 2) for op in ("all_gather", "reduce_scatter", "all_to_all", "all_reduce",
                                                     "send_recv")] == [512, 512, 512, 1024, 1024]
    assert nccl_tests_count("all_gather", 4096, 8) == 128
