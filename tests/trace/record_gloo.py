"""Record real Kineto traces of a small two-process gloo data-parallel job (run as a script by conftest).

Usage: python record_gloo.py OUT_DIR. Writes OUT_DIR/rank0.json and rank1.json: a 3-layer MLP wrapped in
DistributedDataParallel (gradient buckets of 0.25 MB, so several all_reduce calls per step), profiled with
torch.profiler over 3 active steps (ProfilerStep markers present), CPU activity only.
"""
from __future__ import annotations

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule

NUM_PARAMS = (256 * 512 + 512) + (512 * 256 + 256)
ACTIVE_STEPS = 3


def _worker(rank: int, world: int, out: str, port: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.25)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)

    def save(prof) -> None:
        prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, on_trace_ready=save,
                 schedule=schedule(wait=0, warmup=1, active=ACTIVE_STEPS, repeat=1)) as prof:
        for _ in range(1 + ACTIVE_STEPS + 1):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()
    # the traces are written; leave without the interpreter's teardown, where torch 2.13's CPU build aborts about
    # one exit in ten ("terminate called without an active exception": a joinable native thread destroyed at exit)
    sys.stderr.flush()
    os._exit(0)


def main(out: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(2, out, port), nprocs=2)


if __name__ == "__main__":
    main(sys.argv[1])
