"""The console's pages on each backend (SQLite and PostgreSQL), and the store's bulk read of
each job's last run against the per-job read `chronoctl list` makes."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from chronoctl.web.app import create_app
from chronod.store.sql import SqlStore
from tests.web import ledger

NOW = datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture
def filled(store_url):
    daemon = ledger.stand_in()
    try:
        ids = ledger.build(store_url, NOW, pid=daemon.pid)
        st = SqlStore(store_url)
        yield st, ids
        st.close()
    finally:
        daemon.kill()
        daemon.wait()


def test_last_runs_is_each_jobs_latest_run_as_a_per_job_read_finds_it(filled):
    store, _ = filled
    ids = [r.job_id for r in store.jobs()] + ["no-such-job"]
    bulk = store.last_runs(ids, until=NOW, skip=("pending", "retry_wait"))
    for job_id in ids:
        done = [r for r in store.runs(job_id, until=NOW, limit=5) if r.state not in ("pending", "retry_wait")]
        assert (bulk.get(job_id).run_id if job_id in bulk else None) == (done[0].run_id if done else None), job_id
    states = store.last_states(ids, until=NOW, skip=("pending", "retry_wait"))
    assert states == {job_id: run.state for job_id, run in bulk.items()}
    assert store.last_runs([], until=NOW) == {} and store.last_states([], until=NOW) == {}
    assert store.last_runs(ids, until=NOW - timedelta(days=400)) == {}


def test_the_overview_and_a_job_page_answer_on_each_backend(filled):
    store, ids = filled
    c = create_app(store, clock=lambda: NOW).test_client()
    html = c.get("/").get_data(as_text=True)
    assert ">billing-export</a>" in html and "at 02:00 every day" in html
    html = c.get("/job/billing-export").get_data(as_text=True)
    assert len(re.findall(r'<a role="cell" class="cell l-bad"', html)) == 6  # 5 failed nights, 1 missing
    assert c.get(f"/run/{ids['failed']}").status_code == 200
    assert c.get("/missed?since=2d").status_code == 200
