"""A validation case's model recognised as a catalog model: the architecture the corpus schema cannot state.

The corpus schemas (shared/validation/README.md) state a model by its shape — layers, widths, heads, experts, MLA
ranks — and have no key for the rest of an architecture: the norm (RMSNorm or LayerNorm, and with it biases and
learned positions), Qwen3's query- and key-head norms, tied embeddings, node-limited expert routing (DeepSeek-V3's M = 4), GPT-OSS's clamped, offset
GLU and expert biases, in the training schema alternating MoE layers and parallel blocks, in the inference schema
sliding windows. A corpus model identical in every other field to one catalog model (`models.yaml`, every entry with
its source) *is* that published model, as a descriptive GPU name is a catalog device (the README's rule for `gpu`):
the fields its schema has no key for, and the case does not write anyway, come from that entry, and the case says so
in its `chosen` notes. This is identity, not fitting: nothing is read from the measurement, every field comes from
the model's own published configuration. A field the case writes is kept and compared; a model matching no entry, or
several that disagree on the filled fields, keeps the parser's defaults; a model given as a HuggingFace config or a
catalog id states its whole architecture already and is left alone. Only corpus cases are recognised (`validate`,
`FILE#ID`): a scenario or serving file can state every field.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Mapping

from narrowpath.catalog import store
from narrowpath.spec.hf_config import looks_like_hf_config
from narrowpath.spec.model import Model, MoE
from narrowpath.spec.parse import _BLOCK_MOE

UNSTATED = {
    "training": ("norm", "qk_norm", "tied_embeddings", "parallel_attn_mlp", "moe.layer_every", "moe.max_nodes",
                 "moe.expert_bias", "moe.glu_clamp"),
    "inference": ("norm", "qk_norm", "tied_embeddings", "sliding_window", "sliding_window_every", "moe.max_nodes",
                  "moe.expert_bias", "moe.glu_clamp"),
}
"""Per corpus schema, the architecture fields its README has no key for (training: validation-corpus/1 with the
sweeps' extensions, which add sliding windows but no alternating MoE layers or parallel blocks; inference:
inference-corpus/1, which has those two and no sliding windows): taken from the matching catalog entry unless the
case writes them. Every other architecture field is compared."""
NOT_ARCHITECTURE = ("name", "seq_len", "context_len", "mtp_layers", "dropout", "moe.capacity_factor")
"""Never compared nor taken: the name and what belongs to a run, not to the network — its sequence length, the
context limit a server is started with (vLLM's max_model_len), the multi-token-prediction modules trained alongside
(DeepSeek-V3 §2.2: an add-on objective; a run may leave it out), dropout (follows the family unless written,
spec.model.Model.dropout) and the capacity factor (`plan.moe_routing`)."""

_SHOWN = {"norm": lambda v: v, "qk_norm": lambda v: "query and key heads normalised" if v else "no query/key norms",
          "tied_embeddings": lambda v: "tied embeddings" if v else "untied embeddings",
          "sliding_window": lambda v: f"a sliding window of {v} tokens" if v else "no sliding window",
          "sliding_window_every": lambda v: f"windowed every {v} layers",
          "parallel_attn_mlp": lambda v: "attention and MLP in parallel" if v else "attention then MLP",
          "moe.layer_every": lambda v: f"an MoE layer every {v} layers",
          "moe.max_nodes": lambda v: f"experts on at most {v} nodes per token" if v else "routing not node-limited",
          "moe.expert_bias": lambda v: "expert biases" if v else "no expert biases",
          "moe.glu_clamp": lambda v: f"GLU clamped at {v:g}" if v else "plain GLU"}


def _get(model: Model, field: str) -> Any:
    if field.startswith("moe."):
        return None if model.moe is None else getattr(model.moe, field[4:])
    return getattr(model, field)


FIELDS = tuple(f.name for f in dataclasses.fields(Model)) + tuple(f"moe.{f.name}" for f in dataclasses.fields(MoE))
"""Every Model field and every MoE field (as `moe.<field>`)."""


def _key(model: Model, skip: tuple[str, ...]) -> tuple[Any, ...]:
    """The model's architecture without the fields in `skip` (and never NOT_ARCHITECTURE's); the dense MLP width
    of an MoE model none of whose layers is dense is no part of it (a corpus may leave it out: the parser then
    defaults it)."""
    moe = model.moe
    unused = ("ffn",) if moe is not None and not moe.first_dense_layers and moe.layer_every == 1 else ()
    return tuple((f, _get(model, f)) for f in FIELDS
                 if f not in skip and f not in NOT_ARCHITECTURE and f != "moe" and f not in unused)


@lru_cache(maxsize=1)
def _catalog() -> tuple[Model, ...]:
    return tuple(store.model(eid) for eid in store.model_ids())


@lru_cache(maxsize=64)
def _catalog_keys(filled: tuple[str, ...]) -> tuple[tuple[tuple[Any, ...], Model], ...]:
    """(architecture key without `filled`, model) of every catalog entry: computed once per set of filled fields,
    not once per corpus case."""
    return tuple((_key(m, filled), m) for m in _catalog())


def written_fields(raw: Mapping[str, Any]) -> set[str]:
    """The model fields a case's `model` mapping writes (a null is not written); MoE-block keys as `moe.<field>`."""
    out = {k for k, v in raw.items() if v is not None}
    block = raw.get("moe")
    if isinstance(block, Mapping):
        out |= {f"moe.{_BLOCK_MOE.get(k, k)}" for k, v in block.items() if v is not None}
    return out


def catalog_match(model: Model, filled: tuple[str, ...]) -> Model | None:
    """The catalog model identical to `model` in every architecture field but `filled`; None when none is, or when
    several are and disagree on `filled`."""
    key = _key(model, filled)
    found = [m for k, m in _catalog_keys(filled) if k == key]
    if not found or len({tuple(_get(m, f) for f in filled) for m in found}) > 1:
        return None
    return found[0]


def with_catalog_architecture(model: Model, raw: Any, schema: str) -> tuple[Model, tuple[tuple[str, str], ...]]:
    """(model, chosen notes): the corpus case's `model` (parsed from the mapping `raw`) with the fields its `schema`
    cannot state and it does not write taken from the catalog model it matches (module docstring); unchanged, with no
    note, when `raw` is not a corpus mapping, nothing matches or nothing differs."""
    if not isinstance(raw, Mapping) or "hf_config" in raw or looks_like_hf_config(raw):
        return model, ()
    written = written_fields(raw)
    filled = tuple(f for f in UNSTATED[schema] if f not in written)
    ref = catalog_match(model, filled)
    if ref is None:
        return model, ()
    changed = {f: _get(ref, f) for f in filled if _get(model, f) != _get(ref, f)}
    if not changed:
        return model, ()
    top = {f: v for f, v in changed.items() if not f.startswith("moe.")}
    moe = {f[4:]: v for f, v in changed.items() if f.startswith("moe.")}
    new_moe: MoE | None = dataclasses.replace(model.moe, **moe) if moe else model.moe
    # dropout follows the family (spec.model.Model.dropout) unless the case writes it: re-derived for the new norm
    dropout = model.dropout if "dropout" in written else None
    out = dataclasses.replace(model, **top, moe=new_moe, dropout=dropout)
    what = ", ".join(_SHOWN[f](v) for f, v in changed.items())
    them = "them" if len(changed) > 1 else "it"
    return out, (("model", f"{what} — the catalog's {ref.name}, which every stated model field matches (the corpus "
                           f"schema has no field for {them})"),)
