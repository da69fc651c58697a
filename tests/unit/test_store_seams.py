"""The store's seams: nothing outside `chronod/store` reaches into a private member of
the SQL store (the outbox and the tests go through its public `database`), and every
method of the `Store` interface belongs to exactly one role."""

from __future__ import annotations

import re
from pathlib import Path

from chronod.store import api
from chronod.store.sql import SqlStore

ROOT = Path(__file__).resolve().parents[2]


def private_members() -> list[str]:
    """The SQL store's private attributes and methods (its lock and password included)."""
    names = {n for n in dir(SqlStore) if n.startswith("_") and not n.startswith("__")}
    return sorted(names | {"_lock", "_password"})


def reaches(text: str, names: list[str]) -> list[str]:
    """`x._name` for any `x` but `self`/`cls`, and `getattr(x, "_name")`, in `text`."""
    alternatives = "|".join(map(re.escape, names))
    dotted = re.compile(rf"\b(?!self\b|cls\b)[A-Za-z_]\w*\.({alternatives})\b")
    by_name = re.compile(rf"getattr\(\s*[A-Za-z_][\w.]*\s*,\s*[\"']({alternatives})[\"']")
    return [m.group(0) for m in dotted.finditer(text)] + [m.group(0) for m in by_name.finditer(text)]


def test_the_check_finds_a_reach_into_the_store():
    names = private_members()
    assert "_tx" in names and "_lease_live" in names
    assert reaches("with self.store._tx(write=False) as c:", names) == ["store._tx"]
    assert reaches('getattr(store, "_select_runs")', names) == ['getattr(store, "_select_runs"']
    assert reaches("with self._tx() as c: self._lock", names) == []


def test_no_module_outside_the_store_touches_a_private_member_of_the_store():
    names = private_members()
    found = []
    for folder in ("chronod", "chronoctl", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("chronod", "store") or rel == Path(__file__).relative_to(ROOT):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                found += [f"{rel}:{number}: {hit}" for hit in reaches(line, names)]
    assert not found, "\n".join(found)


def protocol_methods(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


def test_every_store_method_belongs_to_exactly_one_role():
    owners: dict[str, list[str]] = {}
    for role in api.STORE_ROLES:
        for name in protocol_methods(role):
            owners.setdefault(name, []).append(role.__name__)
    assert {n: r for n, r in owners.items() if len(r) > 1} == {}
    everything = {
        n
        for cls in api.Store.__mro__
        if cls.__name__ in {r.__name__ for r in api.STORE_ROLES}
        for n in protocol_methods(cls)
    }
    assert set(owners) == everything
    assert protocol_methods(api.Store) == set()  # Store adds nothing of its own: it is the roles
    public = {n for n in dir(SqlStore) if not n.startswith("_") and callable(getattr(SqlStore, n))}
    assert set(owners) <= public


def test_the_architecture_document_lists_each_role_with_its_method_count_and_module():
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("<!-- store roles:", 1)[1]
    rows = re.findall(r"^\| `(\w+)`[^|]*\| (\d+) \| ([\w.]+) \|$", table, re.MULTILINE)
    documented = {role: (int(count), module) for role, count, module in rows}
    expected = {r.__name__: len(protocol_methods(r)) for r in (*api.STORE_ROLES, api.NoticeOutbox)}
    assert {role: count for role, (count, _) in documented.items()} == expected
    for role, (_, module) in documented.items():
        source = (ROOT / "chronod" / "store" / module).read_text()
        if role == "Schema":
            implementer = "SqlStore"
        elif role == "NoticeOutbox":
            implementer = "Outbox"
        else:
            implementer = next(
                c for c in SqlStore.__mro__ if f"`chronod.store.api.{role}`" in (c.__doc__ or "")
            ).__name__
        assert f"class {implementer}(" in source or f"class {implementer}:" in source, (role, module)
