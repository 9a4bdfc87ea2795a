"""A validation case's model recognised as a catalog model: the architecture the corpus schema cannot state.

The corpus schemas (shared/validation/README.md) state a model by its shape — layers, widths, heads, experts, MLA
ranks, sliding windows — and have no field for the rest of an architecture: the norm (RMSNorm or LayerNorm, and with
it biases and learned positions), tied embeddings, node-limited expert routing (DeepSeek-V3's M = 4), GPT-OSS's
clamped, offset GLU and expert biases. A corpus model identical in every field the schema can state to one catalog
model (`models.yaml`, every entry with its source) *is* that published model, as a descriptive GPU name is a catalog
device (the README's rule for `gpu`): the fields the schema has no key for come from that entry, and the case says
so in its `chosen` notes. This is identity, not fitting: nothing is read from the measurement, every field comes from
the model's own published configuration, and a model matching no entry, or several that disagree, keeps the parser's
defaults.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

from narrowpath.catalog import store
from narrowpath.spec.model import Model, MoE

STATED_MODEL_FIELDS = ("arch", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "ffn_act", "vocab", "mla",
                       "sliding_window", "sliding_window_every", "mtp_layers", "parallel_attn_mlp")
"""Model fields a corpus case can state (shared/validation/README.md, both schemas); `seq_len` is the run's, not the
architecture's, and is never compared."""
STATED_MOE_FIELDS = ("num_experts", "top_k", "expert_ffn", "shared_experts", "shared_ffn", "first_dense_layers",
                     "layer_every")
"""MoE fields a corpus case can state (`experts`, `top_k`, `ffn`, `shared_experts`, `shared_ffn`, `dense_layers`,
`moe_layer_every`)."""
ARCHITECTURE_FIELDS = ("norm", "tied_embeddings")
"""Model fields no corpus schema has a key for, taken from the matching catalog entry."""
MOE_ARCHITECTURE_FIELDS = ("max_nodes", "expert_bias", "glu_clamp")
"""MoE fields no corpus schema has a key for, taken from the matching catalog entry (the capacity factor is a run's
setting — `plan.moe_routing` — and stays the case's)."""

_SHOWN = {"norm": lambda v: v, "tied_embeddings": lambda v: "tied embeddings" if v else "untied embeddings",
          "max_nodes": lambda v: f"experts on at most {v} nodes per token" if v else "routing not node-limited",
          "expert_bias": lambda v: "expert biases" if v else "no expert biases",
          "glu_clamp": lambda v: f"GLU clamped at {v:g}" if v else "plain GLU"}


def _stated(model: Model) -> tuple[Any, ...]:
    moe = None if model.moe is None else tuple(getattr(model.moe, f) for f in STATED_MOE_FIELDS)
    return tuple(getattr(model, f) for f in STATED_MODEL_FIELDS) + (moe,)


def _unstated(model: Model) -> tuple[Any, ...]:
    moe = () if model.moe is None else tuple(getattr(model.moe, f) for f in MOE_ARCHITECTURE_FIELDS)
    return tuple(getattr(model, f) for f in ARCHITECTURE_FIELDS) + moe


@lru_cache(maxsize=1)
def _by_shape() -> dict[tuple[Any, ...], tuple[Model, ...]]:
    out: dict[tuple[Any, ...], tuple[Model, ...]] = {}
    for eid in store.model_ids():
        m = store.model(eid)
        out[_stated(m)] = out.get(_stated(m), ()) + (m,)
    return out


def catalog_match(model: Model) -> Model | None:
    """The catalog model identical to `model` in every field a corpus can state; None when none is, or when several
    are and disagree on what the corpus cannot state."""
    found = _by_shape().get(_stated(model), ())
    if not found or len({_unstated(m) for m in found}) > 1:
        return None
    return found[0]


def with_catalog_architecture(model: Model) -> tuple[Model, tuple[tuple[str, str], ...]]:
    """(model, chosen notes): `model` with the unstatable fields of the catalog model it matches (module docstring);
    unchanged, with no note, when it matches none or already agrees."""
    ref = catalog_match(model)
    if ref is None:
        return model, ()
    top = {f: getattr(ref, f) for f in ARCHITECTURE_FIELDS if getattr(model, f) != getattr(ref, f)}
    moe = {} if model.moe is None else \
        {f: getattr(ref.moe, f) for f in MOE_ARCHITECTURE_FIELDS if getattr(model.moe, f) != getattr(ref.moe, f)}
    if not top and not moe:
        return model, ()
    new_moe: MoE | None = dataclasses.replace(model.moe, **moe) if moe else model.moe
    # dropout follows the family (spec.model.Model.dropout) unless the case's own model stated it: re-derive it
    dropout = None if model.dropout == (not (model.ffn_act == "swiglu" or model.norm == "rmsnorm")) else model.dropout
    out = dataclasses.replace(model, **top, moe=new_moe, dropout=dropout)
    what = ", ".join(_SHOWN[f](v) for f, v in {**top, **moe}.items())
    them = "them" if len(top) + len(moe) > 1 else "it"
    return out, (("model", f"{what} — the catalog's {ref.name}, which every stated model field matches (the corpus "
                           f"schema has no field for {them})"),)
