"""The ownership table of docs/architecture.md against the code: every attribute the
daemon had on its one shared `self` has one owner; no object writes another's state or
holds the `Daemon`; and no object keeps state the table does not name.

Read from the source (an AST scan of chronod/daemon), so that the table cannot drift."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DAEMON = ROOT / "chronod" / "daemon"
DOC = ROOT / "docs" / "architecture.md"

# The objects the daemon is made of; the first group holds no state of its own.
STATELESS = {"Admission", "Dispatch", "Endings", "Recovery"}
OBJECTS = STATELESS | {
    "Daemon",
    "Registry",
    "Occurrences",
    "Timeline",
    "Gate",
    "Lines",
    "StartLimit",
    "Ledger",
    "Starter",
    "Connectivity",
    "FleetView",
    "Backfills",
    "Heartbeat",
}
ROW = re.compile(r"^\| `?(\w+)`? \| `(\w+)` \| `(\w+)` \| (state|shared) \|$")  # "new": state added since


@functools.cache
def table() -> list[tuple[str, str, str, str]]:
    return [m.groups() for m in map(ROW.match, DOC.read_text().splitlines()) if m]  # type: ignore[misc]


@functools.cache
def classes() -> dict[str, ast.ClassDef]:
    out = {}
    for path in sorted(DAEMON.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name in OBJECTS:
                out[node.name] = node
    return out


def assignments(cls: ast.ClassDef) -> list[tuple[str, str, ast.expr | None, bool]]:
    """(attribute, method, value, writes into another object) for every `self.X = ...`
    (and `self.X.Y = ...`) in the class; value None when it cannot be paired."""
    out: list[tuple[str, str, ast.expr | None, bool]] = []
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            pairs: list[tuple[ast.expr, ast.expr | None]] = []
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        pairs += list(zip(t.elts, node.value.elts))
                    elif isinstance(t, ast.Tuple):
                        pairs += [(e, None) for e in t.elts]
                    else:
                        pairs.append((t, node.value))
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                pairs.append((node.target, node.value))
            for target, value in pairs:
                if not isinstance(target, ast.Attribute):
                    continue
                if isinstance(target.value, ast.Name) and target.value.id == "self":
                    out.append((target.attr, fn.name, value, False))
                elif (
                    isinstance(target.value, ast.Attribute)
                    and isinstance(target.value.value, ast.Name)
                    and target.value.value.id == "self"
                ):
                    out.append((f"{target.value.attr}.{target.attr}", fn.name, value, True))
    return out


def params(cls: ast.ClassDef) -> set[str]:
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return set()
    a = init.args
    return {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}


def is_reference(value: ast.expr | None, given: set[str]) -> bool:
    """A value handed in (a parameter, or an object a part was given), not state made here."""
    if isinstance(value, ast.Name):
        return value.id in given
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        return value.value.id != "self"
    return False


def is_part(value: ast.expr | None) -> bool:
    """One of the daemon's objects, built by the composition (`Daemon.__init__`)."""
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in OBJECTS


def test_the_table_names_every_attribute_of_the_former_daemon_once():
    rows = table()
    before = [r[0] for r in rows if r[0] != "new"]
    assert len(before) == 67 and len(set(before)) == 67, "the 67 attributes of the shared self, one row each"
    assert {r[1] for r in rows} <= OBJECTS


def test_each_attribute_is_written_by_its_owner_alone():
    found = classes()
    writes: dict[str, dict[str, list[tuple[str, ast.expr | None]]]] = {}
    for name, cls in found.items():
        for attr, method, value, _ in assignments(cls):
            writes.setdefault(attr, {}).setdefault(name, []).append((method, value))
    for before, owner, now, kind in table():
        by = writes.get(now, {})
        assert owner in by, f"{owner} does not hold `{now}` (was Daemon.{before})"
        if kind == "state":  # the others may hold the owner's object, handed to them, never write it
            for c, ws in by.items():
                given = params(found[c])
                wrote = [m for m, v in ws if c != owner and (m != "__init__" or not is_reference(v, given))]
                assert not wrote, f"`{now}` ({before}) is written by {c}.{wrote[0]} besides its owner {owner}"
        else:  # shared infrastructure: handed in at construction, never written after
            for c, ws in by.items():
                late = [m for m, _ in ws if m != "__init__"]
                assert not late, f"shared `{now}` is written by {c}.{late[0]}"


def test_no_object_writes_another_objects_attributes_or_holds_the_daemon():
    for name, cls in classes().items():
        for attr, method, _, foreign in assignments(cls):
            assert not foreign, f"{name}.{method} writes self.{attr}: ask its owner through a method"
        if name == "Daemon":
            continue
        init = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
        for arg in [*init.args.args, *init.args.kwonlyargs]:
            text = ast.unparse(arg.annotation) if arg.annotation is not None else ""
            assert "Daemon" not in text, f"{name} is given the Daemon ({arg.arg})"
            assert not re.search(r"\bAny\b", text), f"{name}({arg.arg}: {text}): type the seam"


def test_every_piece_of_state_an_object_keeps_is_in_the_table():
    rows = {(owner, now) for _, owner, now, _ in table()}
    for name, cls in classes().items():
        given = params(cls)
        for attr, method, value, foreign in assignments(cls):
            if foreign or (name, attr) in rows:
                continue
            if method == "__init__" and (is_reference(value, given) or (name == "Daemon" and is_part(value))):
                continue
            assert name not in STATELESS, f"{name} is stateless but keeps self.{attr}"
            raise AssertionError(f"{name}.{attr} is state that docs/architecture.md's ownership table does not list")
