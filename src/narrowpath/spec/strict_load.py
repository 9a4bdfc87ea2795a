"""Parse YAML and JSON text strictly: a duplicate key is an error, and so is a YAML alias bomb.

PyYAML's `safe_load` keeps the last of two equal keys without a word (two `system:` lines: the first is ignored),
and it builds aliases as shared references, so a few hundred bytes of nested aliases (`b: [*a, *a, …]`, nine
levels deep) load instantly into a value with 10⁹ elements that explodes the first time anything walks it —
formatting an error message took 2.2 GB. `load_yaml` counts what the aliases expand to before anything is
constructed and refuses more than MAX_ALIAS_EXPANSION extra nodes, and refuses a recursive alias (`&a [*a]`).
`load_json` refuses duplicate object keys the same way. Both raise the parser's own error type (yaml.YAMLError,
ValueError), so a caller's "not valid YAML/JSON" handling names the file.

Speed: where PyYAML has libyaml (its wheels ship it), the text is scanned and parsed by libyaml's C parser and the
events composed and constructed by PyYAML's Python classes, as here: ~5x faster than the pure-Python loader on a
corpus (0.53 -> 0.09 s for training-sweeps-public.yaml), the same values for every file the project ships, the same
refusals and limits. The two parsers differ at the edges: a text libyaml refuses is read again by the pure-Python
loader (`load_yaml`), so what loaded before still loads (a flow mapping's empty value, `{tp:, dp: 8}`) and an invalid
file gets the message it got before; libyaml alone accepts a tab after a value or inside a flow collection and
reads a bare `!` tag as '' rather than null. PyYAML's own CSafeLoader is not used: its composer is C code that
recurses without a limit, so a deeply nested file (200,000 brackets) kills the process with a segmentation fault,
where the Python composer raises RecursionError.
"""
from __future__ import annotations

import json
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, SequenceNode
from yaml.resolver import Resolver

try:
    from yaml.cyaml import CParser
except ImportError:  # PyYAML built without libyaml
    CParser = None

MAX_ALIAS_EXPANSION = 100_000
"""Nodes that aliases may add when expanded (a scenario or a corpus uses a handful)."""


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def expanded_size(root: Node) -> tuple[int, int]:
    """(nodes once every alias is expanded, distinct nodes) of a composed document; iterative, so a deep document
    does not hit the recursion limit. Raises ConstructorError on a recursive alias."""
    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            continue
        if key in size:
            continue
        if key in open_:  # an ancestor still being expanded: the alias refers to itself
            raise ConstructorError(None, None, "a recursive alias (a value that contains itself) is not allowed",
                                   node.start_mark)
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    return size[id(root)], len(size)


class _Strict:
    """Refusals shared by both loaders: duplicate mapping keys, aliases that expand beyond MAX_ALIAS_EXPANSION
    nodes."""

    def compose_document(self) -> Node:
        node = super().compose_document()
        total, distinct = expanded_size(node)
        if total - distinct > MAX_ALIAS_EXPANSION:
            raise ConstructorError(None, None, f"aliases expand to {total:,} values (more than "
                                   f"{MAX_ALIAS_EXPANSION:,} beyond the {distinct:,} written; an alias bomb?)",
                                   node.start_mark)
        return node

    def construct_mapping(self, node: Node, deep: bool = False) -> dict:
        if isinstance(node, MappingNode):
            seen: dict[Any, tuple[int, int]] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges; explicit keys override it
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeLoader reports it below
                    continue
                if first is not None:
                    raise ConstructorError(None, None, f"duplicate key {str(key)[:60]!r} at line "
                                           f"{key_node.start_mark.line + 1}, column {key_node.start_mark.column + 1} "
                                           f"(first at line {first[0] + 1}, column {first[1] + 1})",
                                           key_node.start_mark)
                seen[key] = (key_node.start_mark.line, key_node.start_mark.column)
        return super().construct_mapping(node, deep=deep)


class StrictLoader(_Strict, yaml.SafeLoader):
    """PyYAML's pure-Python SafeLoader with the strict refusals."""


if CParser is not None:
    class FastStrictLoader(_Strict, Composer, CParser, SafeConstructor, Resolver):
        """libyaml's scanner and parser (C), PyYAML's composer and safe constructor (Python), strict refusals."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
else:  # pragma: no cover - PyYAML without libyaml
    FastStrictLoader = StrictLoader


def load_yaml(text: str) -> Any:
    """One YAML document, parsed strictly: by FastStrictLoader where libyaml is there; a text it refuses is read by
    StrictLoader, which accepts what PyYAML always accepted (`{tp:, dp: 8}`, a flow mapping's empty value) and gives
    its own message for what it refuses too."""
    try:
        return yaml.load(text, Loader=FastStrictLoader)  # noqa: S506 - both are safe loaders
    except yaml.YAMLError:
        if FastStrictLoader is StrictLoader:
            raise
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:60]!r} in a JSON object")
        out[key] = value
    return out


def load_json(text: str) -> Any:
    """JSON text, refusing duplicate object keys."""
    return json.loads(text, object_pairs_hook=_no_duplicates)
