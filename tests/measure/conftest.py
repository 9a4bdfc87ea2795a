"""Shared fixtures of the measure tests: one quick real memory probe per session, logs in nccl-tests format."""
from __future__ import annotations

import pytest

# A log as nccl-tests v2.13 prints it (all_reduce_perf -b 8 -e 128M -f 2 -g 8), trimmed to a few sizes.
NCCL_TESTS_LOG = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41216 on dgx-a100-01 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  41216 on dgx-a100-01 device  1 [0x0f] NVIDIA A100-SXM4-80GB
#  Rank  2 Group  0 Pid  41216 on dgx-a100-01 device  2 [0x47] NVIDIA A100-SXM4-80GB
#  Rank  3 Group  0 Pid  41216 on dgx-a100-01 device  3 [0x4e] NVIDIA A100-SXM4-80GB
#  Rank  4 Group  0 Pid  41216 on dgx-a100-01 device  4 [0x87] NVIDIA A100-SXM4-80GB
#  Rank  5 Group  0 Pid  41216 on dgx-a100-01 device  5 [0x90] NVIDIA A100-SXM4-80GB
#  Rank  6 Group  0 Pid  41216 on dgx-a100-01 device  6 [0xb7] NVIDIA A100-SXM4-80GB
#  Rank  7 Group  0 Pid  41216 on dgx-a100-01 device  7 [0xbd] NVIDIA A100-SXM4-80GB
#
# Reducing maxBytes to 27487790694 due to memory limitation
# Collective test starting: all_reduce_perf
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
           8             2     float     sum      -1    36.30    0.00    0.00      0    35.98    0.00    0.00      0
        1024           256     float     sum      -1    37.52    0.03    0.05      0    37.17    0.03    0.05      0
     1048576        262144     float     sum      -1    62.78   16.70   29.23      0    61.42   17.07   29.88      0
    16777216       4194304     float     sum      -1    163.9  102.36  179.13      0    162.1  103.50  181.12      0
   134217728      33554432     float     sum      -1   1006.4  133.36  233.39      0   1002.8  133.84  234.22      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 88.4741 
#
"""

# Older nccl-tests (no root column) with checking disabled (-c 0): #wrong reads N/A.
NCCL_TESTS_LOG_OLD = """\
# nThread 1 nGpus 2 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 validation: 0
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256   float     sum    20.00    0.05    0.05    N/A    19.00    0.05    0.05    N/A
        2048           512   float     sum    21.00    0.10    0.10    N/A    20.00    0.10    0.10    N/A
        4096          1024   float     sum    22.00    0.19    0.19    N/A    21.00    0.20    0.20    N/A
# Avg bus bandwidth    : 0.11
"""


@pytest.fixture(scope="session")
def memory_result():
    """A real quick memory probe: 64 KiB (cache-resident) up to 256 MiB (beyond the cache this VM gets)."""
    from narrowpath.measure.memory_probe import probe_memory
    return probe_memory(quick=True, progress=False)


@pytest.fixture
def nccl_log_text():
    return NCCL_TESTS_LOG


@pytest.fixture
def nccl_log_old_text():
    return NCCL_TESTS_LOG_OLD
