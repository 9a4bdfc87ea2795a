"""Pickling of specs that hold read-only mappings (`MappingProxyType` cannot be pickled): a spec is rebuilt from
its fields, with plain dicts in place of the proxies, so its checks run again on the other side. Lets worker
processes (search `--jobs`) receive scenarios."""
from __future__ import annotations

import dataclasses
from types import MappingProxyType


def _rebuild(cls, fields: dict):
    return cls(**fields)


def reduce_spec(obj) -> tuple:
    """`__reduce__` for a frozen spec dataclass whose fields may be MappingProxyType."""
    fields = {f.name: (dict(v) if isinstance(v, MappingProxyType) else v)
              for f in dataclasses.fields(obj) for v in (getattr(obj, f.name),)}
    return _rebuild, (type(obj), fields)
