"""The daemon's policies as a new user meets them, on real daemons: the history expects
nothing of a job before it was registered or after it was removed, and a run that waits for
a resource slot is recorded as that, not as an outage or an overlap."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from chronod.store.api import open_store
from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, runs_json, wait_until, write_jobs
from tests.integration.test_fleet import fleet  # noqa: F401  (the fixture)


@pytest.fixture
def env(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    return {
        "reg": reg,
        "db": str(tmp_path / "chrono.db"),
        "log": tmp_path / "chronod.log",
        "w": tmp_path / "witness",
        "tmp": tmp_path,
    }


def daemon(where, environ: dict | None = None) -> Chronod:
    return Chronod(where["reg"], where["db"], where["log"], env=environ)


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


# The catch-up backlog (in scheduled order, one at a time under forbid, on-time occurrences
# waiting their turn) and the idle watchdog are proven without real time: the rules by
# tests/unit/test_policy.py (catchup_turn, overlap "queue"), the real Daemon applying them by
# tests/sim/test_simulation.py (the backlog seeds, and a planner that ignores the order caught),
# and the real process's watchdog pings by tests/integration/test_sd_notify.py.


# --- the history expects occurrences only while a job was registered ------------------------------


def test_report_did_it_run_and_missed_expect_nothing_before_a_job_was_registered_or_after_it_was_removed(env):
    today = datetime.now(timezone.utc).date().isoformat()
    if datetime.now(timezone.utc).hour == 23 and datetime.now(timezone.utc).minute >= 58:
        pytest.skip("the day ends during the test")
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("tick", "@every 2s", "true"), job("nightly", "0 4 * * *", "true")))
    write_jobs(env["reg"] / "b.yaml", jobs_file(job("stays", "@every 1h", "true")))
    d = daemon(env).start()
    first = chronoctl("did-it-run", "nightly", db=env["db"])
    assert first.returncode == 1
    assert "no record" not in first.stdout and "registered at" in first.stdout, first.stdout
    wait_until(
        lambda: len([r for r in runs_json("tick", env["db"]) if r["state"] == "succeeded"]) >= 3,
        what="three runs of tick",
    )
    (env["reg"] / "a.yaml").unlink()
    wait_until(lambda: "event=job.removed" in d.log_since_start(), what="the removal")
    time.sleep(4)  # two more occurrences of tick fall due after its removal
    d.stop()
    rep = json.loads(
        chronoctl("report", "tick", "--from", today, "--to", today, "--format", "json", db=env["db"], check=True).stdout
    )["jobs"][0]
    assert rep["totals"].get("missing", 0) == 0, rep["totals"]
    assert rep["not_registered"] > 1000  # every 2 s of the day, but for the few seconds it was registered
    assert rep["registered"][0]["until"] is not None
    md = chronoctl("report", "tick", "--from", today, "--to", today, db=env["db"], check=True).stdout
    assert "MISSING" not in md and "Not registered:" in md
    missed = json.loads(chronoctl("missed", "--since", "24h", "--json", db=env["db"]).stdout)
    assert [m for o in missed["owners"] for m in o["missed"] if m["state"] == "no_record"] == []


# --- resource waits ----------------------------------------------------------------------------------


def test_a_run_waiting_for_a_resource_stays_pending_then_ends_skipped_resource_naming_it(env):
    w = env["w"]
    write_jobs(
        env["reg"] / "a.yaml",
        "resources:\n  db:\n    max_concurrency: 1\n"
        + jobs_file(
            # run by hand only: `@every 1h` also fell due at a whole hour during a run (seen once)
            job("hog", "0 0 1 1 *", f"echo hog-start >> {w}; sleep 6; echo hog-end >> {w}", resource="db"),
            job("report", "@every 1s", f"echo report >> {w}", resource="db", catchup_window_s=2),
        ),
    )
    d = daemon(env).start()
    chronoctl("trigger", "hog", db=env["db"], check=True)
    # Watched through its witness and the store, not `chronoctl runs`: on a loaded host one
    # chronoctl takes seconds, as long as the hog holds the slot, and a poll missed it.
    witness = lambda: w.read_text() if w.exists() else ""  # noqa: E731
    wait_until(lambda: "hog-start" in witness(), what="hog to run")
    store = open_store(env["db"])

    def waiting_for_the_slot() -> list:
        """Report runs due more than half a second ago and still pending, seen while the hog
        holds the slot (it had not ended when they were read)."""
        due = datetime.now(timezone.utc) - timedelta(seconds=0.5)
        rows = [r for r in store.runs("report", states=["pending"]) if r.fire_at < due]
        return rows if "hog-end" not in witness() else []

    try:
        waiting = wait_until(waiting_for_the_slot, what="a report run that fell due while the hog holds the slot")
    finally:
        store.close()
    wait_until(lambda: "hog-end" in witness(), timeout=15, what="hog to end")
    time.sleep(2.5)
    d.stop()
    runs = runs_json("report", env["db"])
    states = Counter(r["state"] for r in runs)
    print(f"\nFIGURE resource db (1 slot) held 6 s: report's runs {dict(states)}")
    assert waiting, "a run waiting for its slot stays pending"
    skipped = [r for r in runs if r["state"] == "skipped_resource"]
    assert len(skipped) >= 2 and all("'db'" in r["error"] for r in skipped), skipped
    assert states.get("skipped_outage", 0) == 0, states
    # what fell due while the hog held the slot waited for it: a resource wait, never an
    # overlap. Once the slot is free, a report run that outlives its 1 s period (a loaded
    # host) makes the next one skipped_overlap under `overlap: forbid`, as it should.
    (hog,) = [r for r in runs_json("hog", env["db"]) if r["finished_at"] and r["trigger"].startswith("manual")]
    held = (parse(hog["started_at"]), parse(hog["finished_at"]))
    during = [r for r in runs if held[0] <= parse(r["fire_at"]) < held[1]]
    assert during and all(r["state"] != "skipped_overlap" for r in during), during
    assert all("previous run" in r["error"] for r in runs if r["state"] == "skipped_overlap"), runs
    assert states.get("succeeded", 0) >= 1


@pytest.mark.postgres
def test_in_a_fleet_a_resource_wait_on_each_node_is_recorded_as_a_resource_wait(fleet):  # noqa: F811
    w = fleet.w
    body = f"echo start $CHRONO_NODE $(date +%s.%N) >> {w}; sleep 2; echo end $CHRONO_NODE $(date +%s.%N) >> {w}"
    # one slot for two nodes: each occurrence, one node runs and the other waits; its window
    # (1 s) ends before the slot frees (2 s), so it ends skipped_resource, never "outage"
    write_jobs(
        fleet.reg / "a.yaml",
        "resources:\n  db:\n    max_concurrency: 1\n"
        + jobs_file(job("each", "*/4 * * * * *", body, resource="db", run_on="each", catchup_window_s=1)),
    )
    for n in ("a", "b"):
        fleet.start(n)
    time.sleep(13)
    fleet.stop_all()
    time.sleep(2.5)
    runs = runs_json("each", fleet.db)
    states = Counter(r["state"] for r in runs)
    print(f"\nFIGURE run_on each, resource db (1 slot), 2 nodes: {dict(states)}")
    assert states.get("skipped_outage", 0) == 0 and states.get("skipped_overlap", 0) == 0, states
    skipped = [r for r in runs if r["state"] == "skipped_resource"]
    assert len(skipped) >= 1 and all("'db'" in r["error"] for r in skipped), skipped
    depth = most = 0
    for kind, _, _ in sorted((line.split() for line in w.read_text().splitlines()), key=lambda e: float(e[2])):
        depth += 1 if kind == "start" else -1
        most = max(most, depth)
    assert most == 1


# --- a job on each node: whose times -------------------------------------------------------------


def test_list_status_next_and_explain_show_a_job_on_each_node_on_every_node_the_database_knows(env):
    from chronod.core.occurrence import placement
    from chronod.specfile import load_registry
    from chronod.store.api import open_store

    write_jobs(env["reg"] / "a.yaml", jobs_file(job("rotate", "0 4 * * *", "true", run_on="each", tolerance_s=300)))
    store = open_store(env["db"])
    try:
        store.upgrade()
        for name in ("web1", "web2"):
            store.release_node(name, store.acquire_node(name, pid=1, hostname=name, boot_id="b", ttl_s=60))
        spec = load_registry([env["reg"]], now=datetime.now(timezone.utc), secure=False).jobs["rotate"]
        store.sync_jobs("web1", [spec])
    finally:
        store.close()
    offsets = {n: placement(spec, n).offset_s for n in ("web1", "web2")}
    assert offsets["web1"] != offsets["web2"]
    listed = json.loads(chronoctl("list", "--json", "--registry", str(env["reg"]), db=env["db"], check=True).stdout)
    row = listed["jobs"][0]
    assert {n["node"]: n["jitter_offset_s"] for n in row["nodes"]} == offsets
    assert row["next_node"] == min(row["nodes"], key=lambda n: n["next_fire_at"])["node"]
    status = json.loads(chronoctl("status", "rotate", "--json", db=env["db"]).stdout)
    assert {n["node"]: n["jitter_offset_s"] for n in status["nodes"]} == offsets
    for cmd in ("next", "explain"):
        text = chronoctl(
            cmd, "rotate", "--node", "web2", "--registry", str(env["reg"]), db=env["db"], check=True
        ).stdout
        assert "times for node web2" in text, text
        assert f"node web1: jitter +{offsets['web1']}s" in text and f"node web2: jitter +{offsets['web2']}s" in text
    nxt = json.loads(
        chronoctl(
            "next", "rotate", "--node", "web2", "--json", "--registry", str(env["reg"]), db=env["db"], check=True
        ).stdout
    )
    assert {o["node"] for o in nxt} == {"web2"}
