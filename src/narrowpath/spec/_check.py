"""Small field validators shared by the spec dataclasses. Each raises SpecError naming the field and value."""
from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from narrowpath.errors import SpecError, shown


def positive_int(field: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise SpecError(field, f"must be an integer >= {minimum}, got {shown(value)}")
    if value < minimum:
        raise SpecError(field, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SpecError(field, f"must be <= {maximum:,}, got {value:,}" if value < 10**15 else
                        f"must be <= {maximum:,}, got {float(value):.3g}")
    return value


def positive_float(field: str, value: Any, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, f"must be a number, got {shown(value)}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise SpecError(field, f"must be a finite number {bound}, got {value}")
    return value


def fraction(field: str, value: Any) -> float:
    value = positive_float(field, value)
    if value > 1.0:
        raise SpecError(field, f"must be in (0, 1], got {value}")
    return value


def choice(field: str, value: Any, options: Iterable[str]) -> str:
    options = tuple(options)
    if value not in options:
        raise SpecError(field, f"must be one of {', '.join(options)}; got {shown(value)}")
    return value


def boolean(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, f"must be true or false, got {shown(value)}")
    return value


def text_mapping(field: str, value: Any) -> Mapping[str, str]:
    """A read-only mapping of field name → text (a spec's `sources`: where each figure comes from); a list or a
    number is refused in one line (dict() of a list of strings raised ValueError, of a number TypeError)."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise SpecError(field, f"must be a mapping of field -> text (where each figure comes from), got {shown(value)}")
    return MappingProxyType(dict(value))


def size_points(field: str, points: Any) -> tuple[tuple[float, float], ...]:
    """(size > 0, efficiency in (0, 1]) pairs of a measured efficiency-by-size table, each finite, in ascending size
    (a table may list them in any order; one size twice is refused)."""
    out = []
    for i, pt in enumerate(points):
        try:
            size, eff = pt
        except (TypeError, ValueError):
            raise SpecError(f"{field}[{i}]", f"must be a (size, efficiency) pair, got {shown(pt)}") from None
        out.append((positive_float(f"{field}[{i}].size", size), fraction(f"{field}[{i}].efficiency", eff)))
    sizes = [s for s, _ in out]
    if len(set(sizes)) != len(sizes):
        dup = next(s for s in sizes if sizes.count(s) > 1)
        raise SpecError(field, f"gives size {dup:g} more than once")
    return tuple(sorted(out))  # the interpolation reads them in ascending size


def as_int(obj: Any, attr: str, field: str, **limits: Any) -> None:
    """Check `obj.attr` with positive_int and keep the int it returns (a frozen spec object): a YAML `64.0` is
    accepted as 64 and then used as one (slices, ranges, dictionary keys)."""
    object.__setattr__(obj, attr, positive_int(field, getattr(obj, attr), **limits))
