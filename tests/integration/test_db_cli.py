"""`chronoctl db check|upgrade` through the chronoctl error boundary, on a real database."""

from __future__ import annotations

import json

import pytest

from chronoctl import main as cli
from chronod.store.schema import HEAD_REVISION


@pytest.fixture(autouse=True)
def db_command(monkeypatch):
    # Harmless once chronoctl.main lists the group itself.
    monkeypatch.setitem(cli.COMMAND_MODULES, "db", "chronoctl.cmd_db")


def chronoctl(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_check_says_an_upgrade_is_pending_then_upgrade_makes_it_current(capsys, tmp_path):
    db = str(tmp_path / "chrono.db")
    code, out, err = chronoctl(capsys, "db", "check", "--db", db)
    assert code == 3 and f"no database at {db}" in err  # as every other command says it
    assert not (tmp_path / "chrono.db").exists()
    code, out, _ = chronoctl(capsys, "db", "upgrade", "--db", db)
    assert code == 0 and f"from revision none to {HEAD_REVISION}" in out
    code, out, _ = chronoctl(capsys, "db", "check", "--db", db, "--json")
    assert code == 0
    assert json.loads(out) == {
        "url": f"sqlite:///{db}",
        "revision": HEAD_REVISION,
        "head": HEAD_REVISION,
        "status": "current",
    }


def test_a_directory_or_a_database_chrono_does_not_speak_is_a_usage_error(capsys, tmp_path):
    for args in (("db", "check"), ("status",), ("runs", "x")):
        code, _, err = chronoctl(capsys, *args, "--db", str(tmp_path))
        assert code == 2 and "is a directory, not a database file" in err, (args, err)
        code, _, err = chronoctl(capsys, *args, "--db", "mysql://u:secret@h/db")
        assert code == 2 and "not mysql" in err and "secret" not in err, (args, err)


def test_check_on_a_database_from_a_newer_chrono_says_upgrade_chrono(capsys, tmp_path):
    import sqlalchemy as sa

    db = str(tmp_path / "chrono.db")
    chronoctl(capsys, "db", "upgrade", "--db", db)
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0999'"))
    engine.dispose()
    code, out, _ = chronoctl(capsys, "db", "check", "--db", db)
    assert code == 1 and "upgrade chrono" in out and "0999" in out


def test_an_unreachable_database_exits_3_without_its_password(capsys):
    code, out, err = chronoctl(capsys, "db", "check", "--db", "postgresql://chrono:hunter2-pw@127.0.0.1:1/chrono")
    assert code == 3
    assert "hunter2-pw" not in out + err and err.startswith("chronoctl: error: ")


@pytest.mark.postgres
def test_upgrade_on_postgres_reaches_head(capsys, new_pg_database):
    pg_dsn = new_pg_database(migrated=False)
    code, out, _ = chronoctl(capsys, "db", "upgrade", "--db", pg_dsn)
    assert code == 0 and HEAD_REVISION in out
    code, _, _ = chronoctl(capsys, "db", "check", "--db", pg_dsn)
    assert code == 0
