"""Cost values checked by hand where mutation testing (benchmarks/mutation.py, seed 16) found them loose: the
message of a serving plan whose KV cache holds less than one block."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.cost.serving_memory import serving_memory
from narrowpath.errors import InfeasibleError
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.serving import Formats, kv_bytes_per_token


def test_a_kv_pool_below_one_block_names_its_size_tokens_and_block():
    """Llama-3 8B served on one H100 (bf16, tp 1): a token's KV takes 2 (K, V) · 32 layers · 8 KV heads · 128 ·
    2 bytes = 131,072 bytes. A KV fraction that leaves 10.5 tokens' worth of the free memory (1,376,256 bytes) holds
    10 whole tokens, fewer than one 32-token block: InfeasibleError, whose message gives the pool in GB (0.00), the
    10 tokens and the 32-token block."""
    m, s, p = model("llama3-8b"), system("dgx-h100"), ServingPlan()
    f = Formats.of(p, True, m)
    assert kv_bytes_per_token(m, p, range(m.layers)) == 2 * 32 * 8 * 128 * 2 == 131_072
    kw = dict(max_num_tokens=8192, max_batch=256, block_tokens=32)
    free = serving_memory(m, p, s, f, kv_fraction=0.9, **kw).free_bytes
    with pytest.raises(InfeasibleError) as err:
        serving_memory(m, p, s, f, kv_fraction=10.5 * 131_072 / free, **kw)
    assert str(err.value) == ("llama3-8b does not fit for serving: 0.00 GB of KV cache per GPU holds 10 tokens, "
                              "less than one 32-token block")
