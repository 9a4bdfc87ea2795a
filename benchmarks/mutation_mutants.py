"""The mutants of benchmarks/mutation.py: every small error mutmut's operators make in the model stages.

mutmut (>= 3.8) generates mutants as trampolined copies of whole functions and runs them through its own pytest
process; here we only borrow its mutation operators (`mutmut.mutation.file_mutation`: numbers +1, operators
swapped (+/-, *//, </<=, and/or, ...), arguments dropped or set to None, strings changed, conditions of `x if c
else y` forced, `a = b` made `a = None`, ...) and apply each mutant as one edit of the original source, so that
a mutant is a plain file a test run reads. Unlike `mutmut run` this also mutates module- and class-level constants
(NCCL's tree bandwidth factor, the block-scale bytes of MXFP8/NVFP4, dataclass defaults), where several formulas
of the model live. mutmut skips decorated functions (`lru_cache`), docstrings and type annotations; so do we.

A mutant's id is `path:function:hash` (hash of the original and mutated text and its occurrence in that
function), stable while the function's text does not change, so that a list of equivalent mutants survives edits
elsewhere in the file.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider
from mutmut.mutation.file_mutation import MutationVisitor, deep_replace
from mutmut.mutation.mutators import mutation_operators
from mutmut.mutation.pragma_handling import get_ignored_lines

STAGES = ("workload", "cost", "network", "schedule")
"""Packages under src/narrowpath whose modules are mutated (issue 10 item 6: the model stages)."""


@dataclass(frozen=True, slots=True)
class Mutant:
    id: str
    path: str
    """Source file relative to the repository root."""
    line: int
    function: str
    """Enclosing top-level function or `Class.method`; `<module>` / `Class` for constants."""
    operator: str
    """libcst node type that was mutated (Call, BinaryOperation, Float, SimpleString, ...)."""
    original: str
    mutated: str
    span: tuple[int, int] = (0, 0)
    """Lines of the statement it sits in whose execution coverage records (a compound statement's header only)."""
    import_time: bool = False
    """Runs when the module is imported (a constant, a default argument): every test of the pool may see it."""

    def describe(self) -> str:
        return f"{self.path}:{self.line} in {self.function}: {self.original!r} -> {self.mutated!r}"


class _Generated:
    """One file's parsed module and its mutations (kept to apply a mutant later)."""

    def __init__(self, root: Path, rel: str) -> None:
        code = (root / rel).read_text()
        wrapper = MetadataWrapper(cst.parse_module(code))
        ignored = get_ignored_lines(rel, code, wrapper, None)
        visitor = MutationVisitor(mutation_operators, ignored, None)
        self.module = wrapper.visit(visitor)
        positions = wrapper.resolve(PositionProvider)
        self.mutations = visitor.mutations
        self.mutants: list[Mutant] = []
        self.by_id: dict[str, object] = {}
        owners = _top_level_owners(self.module, positions)
        statements = _statements(positions)
        seen: dict[tuple[str, str, str], int] = {}
        for mut in self.mutations:
            pos = positions.get(mut.original_node)
            line = pos.start.line if pos is not None else 0
            owner = _owner(mut, owners, line)
            if owner is None:
                continue  # not a function body or a constant: imports, __all__, docstrings
            original = _code(self.module, mut.original_node)
            mutated = _code(self.module, mut.mutated_node)
            key = (owner[0], original, mutated)
            seen[key] = seen.get(key, 0) + 1
            digest = hashlib.sha1(f"{original}\0{mutated}\0{seen[key]}".encode()).hexdigest()[:8]
            span, import_time = _span(statements, line)
            mutant = Mutant(f"{rel}:{owner[0]}:{digest}", rel, line, owner[0], type(mut.original_node).__name__,
                            original, mutated, span, import_time or owner[1])
            self.mutants.append(mutant)
            self.by_id[mutant.id] = mut

    def source_of(self, mutant_id: str) -> str:
        mut = self.by_id[mutant_id]
        return deep_replace(self.module, mut.original_node, mut.mutated_node).code


def _code(module: cst.Module, node: cst.CSTNode) -> str:
    text = module.code_for_node(node)
    return " ".join(text.split())[:200]


def _top_level_owners(module: cst.Module, positions) -> list[tuple[int, int, str, bool]]:
    """(first line, last line, owner name, is a constant) of every top-level statement a mutant may live in."""
    out = []
    for stmt in module.body:
        pos = positions.get(stmt)
        if pos is None:
            continue
        if isinstance(stmt, cst.FunctionDef):
            out.append((pos.start.line, pos.end.line, stmt.name.value, False))
        elif isinstance(stmt, cst.ClassDef):
            for child in stmt.body.body:
                cpos = positions.get(child)
                if cpos is None:
                    continue
                name = f"{stmt.name.value}.{child.name.value}" if isinstance(child, cst.FunctionDef) \
                    else stmt.name.value
                if isinstance(child, cst.FunctionDef) or _is_constant(child):
                    out.append((cpos.start.line, cpos.end.line, name, not isinstance(child, cst.FunctionDef)))
        elif _is_constant(stmt):
            out.append((pos.start.line, pos.end.line, "<module>", True))
    return out


def _statements(positions) -> list[tuple[int, int, bool]]:
    """(first line, last line coverage can report, runs at import) of every statement."""
    out = []
    for node, pos in positions.items():
        if isinstance(node, cst.SimpleStatementLine):
            out.append((pos.start.line, pos.end.line, False))
        elif isinstance(node, cst.BaseCompoundStatement):
            body = positions.get(node.body)
            header_end = max(pos.start.line, body.start.line - 1) if body is not None else pos.start.line
            out.append((pos.start.line, header_end if body is None or body.start.line > pos.start.line
                        else pos.start.line, isinstance(node, (cst.FunctionDef, cst.ClassDef))))
    return out


def _span(statements, line: int) -> tuple[tuple[int, int], bool]:
    """The innermost statement holding `line` (see Mutant.span)."""
    best = None
    for first, last, at_import in statements:
        if first <= line <= last and (best is None or first > best[0] or (first == best[0] and last < best[1])):
            best = (first, last, at_import)
    if best is None:
        return (line, line), True
    return (best[0], best[1]), best[2]


def _is_constant(stmt: cst.CSTNode) -> bool:
    """An assignment statement (module constant, class attribute or dataclass default), but not `__all__`."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    node = stmt.body[0]
    if isinstance(node, cst.Assign):
        return not any(isinstance(t.target, cst.Name) and t.target.value == "__all__" for t in node.targets)
    return isinstance(node, cst.AnnAssign) and node.value is not None


def _owner(mut, owners, line: int) -> tuple[str, bool] | None:
    for first, last, name, constant in owners:
        if first <= line <= last:
            return name, constant
    return None


def generate(root: Path, stages: tuple[str, ...] = STAGES) -> tuple[list[Mutant], dict[str, _Generated]]:
    """Every mutant of the stage packages (sorted by file, line), and the per-file generators to apply them."""
    files: dict[str, _Generated] = {}
    mutants: list[Mutant] = []
    for stage in stages:
        for path in sorted((root / "src" / "narrowpath" / stage).glob("*.py")):
            if path.name == "__init__.py":
                continue
            rel = str(path.relative_to(root))
            files[rel] = _Generated(root, rel)
            mutants += files[rel].mutants
    return mutants, files
