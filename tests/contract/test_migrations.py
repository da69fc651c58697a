"""Drift: a database built by the migrations and one built from chronod.store.schema agree."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import sqlalchemy as sa

from chronod.store import schema
from chronod.store.sql import SqlStore, migrations_dir


def describe(url: str) -> dict:
    """Tables, columns (loose type, nullability, primary key), indexes, foreign keys, sequences."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            insp = sa.inspect(conn)
            out: dict = {"sequences": sorted(insp.get_sequence_names()) if conn.dialect.name == "postgresql" else []}
            for table in sorted(insp.get_table_names()):
                if table == "alembic_version":
                    continue
                pk = insp.get_pk_constraint(table)["constrained_columns"]
                out[table] = {
                    "columns": {c["name"]: (loose(c["type"]), c["nullable"]) for c in insp.get_columns(table)},
                    "pk": pk,
                    "indexes": sorted((i["name"], tuple(i["column_names"]), bool(i["unique"]))
                                      for i in insp.get_indexes(table)),
                    "fks": sorted((tuple(f["constrained_columns"]), f["referred_table"],
                                   tuple(f["referred_columns"]), (f.get("options") or {}).get("ondelete"))
                                  for f in insp.get_foreign_keys(table)),
                }
            return out
    finally:
        engine.dispose()


def loose(type_) -> str:
    """A type's family: enough to catch TEXT vs INTEGER vs TIMESTAMP drift across dialects."""
    name = type(type_).__name__.upper()
    for family in ("BIGINT", "INTEGER", "TEXT", "BOOLEAN", "TIMESTAMP", "DATETIME", "VARCHAR"):
        if family in name:
            return family
    return name


def create_all(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        schema.metadata.create_all(engine)
    finally:
        engine.dispose()


def upgrade(url: str) -> None:
    store = SqlStore(url)
    try:
        store.upgrade()
    finally:
        store.close()


def test_migrations_and_schema_agree_on_sqlite(tmp_path):
    migrated, declared = f"sqlite:///{tmp_path / 'm.db'}", f"sqlite:///{tmp_path / 'd.db'}"
    upgrade(migrated)
    create_all(declared)
    assert describe(migrated) == describe(declared)


@pytest.mark.postgres
def test_migrations_and_schema_agree_on_postgres(new_pg_database):
    migrated, declared = new_pg_database(migrated=False), new_pg_database(migrated=False)
    upgrade(migrated)
    create_all(declared)
    got = describe(migrated)
    assert got == describe(declared)
    assert "fencing_token_seq" in got["sequences"]
    assert got["runs"]["columns"]["scheduled_at"] == ("TIMESTAMP", False)


def test_head_revision_matches_alembics_head():
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    scripts = ScriptDirectory.from_config(cfg)
    assert scripts.get_heads() == [schema.HEAD_REVISION]
    in_order = [rev.revision for rev in reversed(list(scripts.walk_revisions()))]
    assert tuple(in_order) == schema.REVISIONS


def test_migrations_never_import_the_live_schema():
    for path in [migrations_dir() / "env.py", *sorted((migrations_dir() / "versions").glob("*.py"))]:
        tree = ast.parse(Path(path).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(m and m.startswith("chronod") for m in imported), f"{path} imports {imported}"
