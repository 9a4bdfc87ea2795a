"""A HuggingFace config's sliding window read as the model's (`sliding_window`, `sliding_window_every`): where a
config states one and uses it, on which layers, and where the model cannot hold the share it states."""
from __future__ import annotations

import pytest

from narrowpath.errors import SpecError
from narrowpath.schedule.serving_defaults import vllm0_auto_chunking
from narrowpath.spec.hf_config import model_from_hf_config
from narrowpath.spec.serving import ServingPlan

BASE = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 32000, "rms_norm_eps": 1e-5}


def _window(**cfg):
    m = model_from_hf_config({**BASE, **cfg}, seq_len=4096)
    return m.sliding_window, m.sliding_window_every


@pytest.mark.parametrize("cfg, want", [
    (dict(model_type="mistral", sliding_window=4096), (4096, 1)),  # Mistral 7B v0.1: every layer
    (dict(model_type="mistral", sliding_window=None), (0, 1)),  # v0.2 and later: none
    (dict(model_type="qwen2", sliding_window=131072, use_sliding_window=False), (0, 1)),  # stated, not used
    (dict(model_type="gemma2", sliding_window=4096), (4096, 2)),  # local and global alternate
    (dict(model_type="llama", sliding_window=128,
          layer_types=["sliding_attention", "full_attention"] * 16), (128, 2)),  # GPT-OSS's spelling
    (dict(model_type="llama", sliding_window=128, layer_types=["full_attention"] * 32), (0, 1)),
    (dict(model_type="gemma3_text", sliding_window=1024), (0, 1)),  # 5 of 6 layers local: not representable
    (dict(model_type="gemma3_text", sliding_window=1024, sliding_window_pattern=2), (1024, 2)),
    (dict(model_type="llama", sliding_window=512,
          layer_types=["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 26), (0, 1)),
])
def test_the_window_and_its_layers(cfg, want):
    assert _window(**cfg) == want


def test_a_bad_window_names_the_key():
    with pytest.raises(SpecError) as exc:
        _window(model_type="mistral", sliding_window=0)
    assert exc.value.field == "config.json.sliding_window"


def test_a_window_vetoes_vllm_v0s_automatic_chunking():
    """Phi-3 mini 128k states a window of 262,144 tokens over a 131,072-token limit: vLLM V0 sees a sliding window
    (get_sliding_window) and does not chunk by itself; the same limit without a window does."""
    cfg = {**BASE, "model_type": "phi3", "max_position_embeddings": 131072}
    windowed = model_from_hf_config({**cfg, "sliding_window": 262144}, seq_len=4096)
    plain = model_from_hf_config(cfg, seq_len=4096)
    assert not vllm0_auto_chunking(windowed, ServingPlan(), 32768)
    assert vllm0_auto_chunking(plain, ServingPlan(), 32768)
