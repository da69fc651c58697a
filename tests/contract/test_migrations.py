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
                    "indexes": sorted(
                        (i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in insp.get_indexes(table)
                    ),
                    "fks": sorted(
                        (
                            tuple(f["constrained_columns"]),
                            f["referred_table"],
                            tuple(f["referred_columns"]),
                            (f.get("options") or {}).get("ondelete"),
                        )
                        for f in insp.get_foreign_keys(table)
                    ),
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


def upgrade_to(conn: sa.Connection, revision: str) -> None:
    """The migrations up to `revision`, on `conn`, as alembic runs them."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)


def migrate(url: str) -> None:
    """Every migration in turn, as an existing database is upgraded."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            upgrade_to(conn, "head")
    finally:
        engine.dispose()


def upgrade(url: str) -> None:
    """What chronod does to a new database: it is created at the head and stamped."""
    store = SqlStore(url)
    try:
        store.upgrade()
        assert store.schema_revision() == schema.HEAD_REVISION
    finally:
        store.close()


def sqlite_ddl(url: str) -> dict[tuple[str, str], str]:
    """Every table's and index's CREATE statement, whitespace and quotes aside, and a
    table's columns in name order (a migration adds a column at the end)."""
    import re

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
            out = {}
            for kind, name, sql in rows:
                text = re.sub(r"\s+", " ", (sql or "").replace('"', "")).strip()
                if kind == "table":
                    head, body = text.split("(", 1)
                    body = body.strip().removesuffix(")")
                    text = head.strip() + " (" + ", ".join(sorted(part.strip() for part in body.split(","))) + ")"
                out[(kind, name)] = text
            return out
    finally:
        engine.dispose()


def test_migrations_and_schema_agree_on_sqlite(tmp_path):
    migrated, declared, new = (f"sqlite:///{tmp_path / n}" for n in ("m.db", "d.db", "n.db"))
    migrate(migrated)
    create_all(declared)
    upgrade(new)
    assert describe(migrated) == describe(declared) == describe(new)
    # word for word (partial indexes' conditions, defaults): a new database is made by
    # create_all, an old one by the migrations, and both must be the same database
    assert sqlite_ddl(migrated) == sqlite_ddl(new)


@pytest.mark.postgres
def test_migrations_and_schema_agree_on_postgres(new_pg_database):
    migrated, declared, new = (new_pg_database(migrated=False) for _ in range(3))
    migrate(migrated)
    create_all(declared)
    upgrade(new)
    got = describe(migrated)
    assert got == describe(declared) == describe(new)
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


def test_upgrading_a_database_from_before_the_registration_record_dates_each_job_from_its_history(tmp_path):
    """0003 gives every existing job one span: from its first run (or its definition, if
    no run is older) to its removal, so an old history is not suddenly 'not registered'."""
    from datetime import datetime, timezone

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            upgrade_to(conn, "0002")
            job = "INSERT INTO jobs VALUES (:id, '{}', 'h', 'n1', 0, NULL, NULL, :removed, :updated)"
            conn.execute(sa.text(job), {"id": "old", "removed": None, "updated": "2026-03-10 00:00:00.000000"})
            conn.execute(
                sa.text(job),
                {"id": "gone", "removed": "2026-03-12 00:00:00.000000", "updated": "2026-03-12 00:00:00.000000"},
            )
            conn.execute(
                sa.text(
                    "INSERT INTO runs (run_id, job_id, job_key, scheduled_at, fire_at, state, attempts, output_bytes, "
                    "trigger) VALUES ('r1', 'old', 'old', '2026-03-01 02:00:00.000000', '2026-03-01 02:00:00.000000', "
                    "'succeeded', 1, 0, 'schedule')"
                )
            )
    finally:
        engine.dispose()
    store = SqlStore(url)
    try:
        store.upgrade()
        spans = store.known_spans()
    finally:
        store.close()
    utc = timezone.utc
    assert spans == {
        "old": [(datetime(2026, 3, 1, 2, 0, tzinfo=utc), None)],
        "gone": [(datetime(2026, 3, 12, tzinfo=utc), datetime(2026, 3, 12, tzinfo=utc))],
    }


def test_the_paused_jobs_read_at_every_wake_up_uses_its_index_on_sqlite(tmp_path):
    """`pauses()` runs at every wake-up of the loop and every round of the notifier; without
    the partial index it scanned every job (28 ms at 100,000 jobs). SQLite uses a partial
    index only when the query repeats its condition word for word, so this pins the pair."""
    store = SqlStore(f"sqlite:///{tmp_path}/c.db")
    seen: list[tuple[str, object]] = []
    try:
        store.upgrade()

        def note(conn, cursor, stmt, params, *rest):
            seen.append((stmt, params))

        sa.event.listen(store.engine, "before_cursor_execute", note)
        store.pauses(include_removed=True)
        store.pauses()
        sa.event.remove(store.engine, "before_cursor_execute", note)
        with store.engine.connect() as conn:
            plans = [
                " ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + stmt, params).all())
                for stmt, params in seen
                if "FROM jobs" in stmt
            ]
    finally:
        store.close()
    assert len(plans) == 2 and all("ix_jobs_paused" in p for p in plans), plans
