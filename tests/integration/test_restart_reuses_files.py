"""A restart reuses each unchanged job file's validated result from the database (issue 24:
restart in seconds), and everything that changed while chronod was down takes effect
exactly as on a cold start: an edited file, a file made group-writable, a removed file, a
file that became invalid. Real daemons on one database, compared with a fresh one."""

from __future__ import annotations

import json
import signal
import sqlite3

from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, wait_until, write_jobs


def _listed(db: str) -> dict[str, str]:
    out = json.loads(chronoctl("list", "--json", db=db, check=True).stdout)
    return {j["job_id"]: j["schedule"] for j in out["jobs"]}


def _errors(db: str) -> list[str]:
    status = json.loads(chronoctl("status", "--json", db=db).stdout)
    return sorted(f"{e['file'].rsplit('/', 1)[-1]}: {e['message']}" for e in status.get("registry_errors", []))


def _stored(db: str) -> dict[str, str]:
    """The stored files (not the mark of the checked definitions, the row without a path)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT path, file_key FROM registry_files WHERE path != ''")
        return {p.rsplit("/", 1)[-1]: k for p, k in rows}


def test_what_changed_while_down_takes_effect_as_on_a_cold_start(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    for name in "abcde":
        write_jobs(reg / f"{name}.yaml", jobs_file(job(name, "@every 1h", "true")))
    db, log = str(tmp_path / "chrono.db"), tmp_path / "chronod.log"
    first = Chronod(reg, db, log).start()
    first.stop()
    assert sorted(_stored(db)) == ["a.yaml", "b.yaml", "c.yaml", "d.yaml", "e.yaml"]
    before = _stored(db)

    write_jobs(reg / "a.yaml", jobs_file(job("a", "@every 2h", "true")))  # edited
    (reg / "b.yaml").chmod(0o666)  # fails the file checks (the daemon runs as root)
    (reg / "c.yaml").unlink()  # removed
    write_jobs(reg / "d.yaml", jobs_file(job("d", "@every 1h", "true", idempotency_class="sometimes")))  # invalid
    second = Chronod(reg, db, log).start()
    second.stop()

    fresh_db = str(tmp_path / "fresh.db")
    third = Chronod(reg, fresh_db, tmp_path / "fresh.log").start()
    third.stop()
    assert _listed(db) == _listed(fresh_db) == {"a": "@every 2h", "e": "@every 1h"}
    assert _errors(db) == _errors(fresh_db) and len(_errors(db)) >= 2
    after = _stored(db)
    assert "c.yaml" not in after and after["e.yaml"] == before["e.yaml"] and after["a.yaml"] != before["a.yaml"]


def test_a_sighup_after_a_restart_goes_the_same_way(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "a.yaml", jobs_file(job("a", "@every 1h", "true")))
    write_jobs(reg / "b.yaml", jobs_file(job("b", "@every 1h", "true")))
    db, log = str(tmp_path / "chrono.db"), tmp_path / "chronod.log"
    Chronod(reg, db, log).start().stop()
    daemon = Chronod(reg, db, log).start()  # from the stored results
    write_jobs(reg / "b.yaml", jobs_file(job("b", "@every 3h", "true")))
    daemon.send(signal.SIGHUP)
    wait_until(lambda: _listed(db).get("b") == "@every 3h", what="the reload of b.yaml")
    daemon.stop()
    Chronod(reg, db, log).start().stop()
    assert _listed(db) == {"a": "@every 1h", "b": "@every 3h"}
