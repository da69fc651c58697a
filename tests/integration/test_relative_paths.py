"""A daemon started with relative paths, as an operator types them in a shell."""

from __future__ import annotations

import pytest

from tests.integration.daemon_helpers import Chronod, job, jobs_file, runs_json, wait_until, write_jobs

pytestmark = pytest.mark.slow


def test_a_relative_database_path_runs_jobs_whose_workdir_is_elsewhere(tmp_path, monkeypatch):
    # Supervisors run in the job's workdir ("/" by default): a state directory given
    # relative to the daemon's cwd made every run look like a dead supervisor.
    (tmp_path / "reg").mkdir()
    write_jobs(tmp_path / "reg" / "a.yaml", jobs_file(job("rel", "*/2 * * * * *", "echo hi")))
    monkeypatch.chdir(tmp_path)
    d = Chronod(tmp_path / "reg", "c.db", tmp_path / "d.log", "--insecure-registry")
    d.registry = "reg"
    d.start()
    db = str(tmp_path / "c.db")
    done = wait_until(lambda: [r for r in runs_json("rel", db) if r["state"] == "succeeded"], timeout=20)
    d.stop()
    assert done[0]["attempts"] == 1
    assert "supervisor died" not in d.log_since_start()
    assert not [r for r in runs_json("rel", db) if r["state"] in ("lost", "retry_wait", "failed")]
