"""Backfill through the real binaries: chosen like `missed`, run by chronod under each
occurrence's own identity, recorded with trigger backfill, resumed after a kill -9."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from chronod.core.occurrence import run_id, utc_stamp
from chronod.store.api import Run
from chronod.store.sql import SqlStore
from tests.integration.daemon_helpers import (
    Chronod,
    chronoctl,
    job,
    jobs_file,
    registered_since,
    wait_until,
    write_jobs,
)


@pytest.fixture
def env(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    return {"reg": reg, "db": str(tmp_path / "chrono.db"), "log": tmp_path / "chronod.log", "w": tmp_path / "witness"}


def hours_ago(n: int) -> datetime:
    top = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    return top - timedelta(hours=n)


def past_run(job_id: str, at: datetime, state: str) -> Run:
    return Run(
        run_id=run_id(job_id, at),
        job_id=job_id,
        job_key=job_id,
        scheduled_at=at,
        fire_at=at,
        state=state,
        attempts=1,
        node="elsewhere",
        started_at=at,
        finished_at=at + timedelta(seconds=1),
        exit_code=0 if state == "succeeded" else 1,
    )


def start(env, *jobs: str) -> Chronod:
    write_jobs(env["reg"] / "a.yaml", jobs_file(*jobs))
    return Chronod(env["reg"], env["db"], env["log"]).start()


def test_a_backfill_runs_what_missed_reports_oldest_first_under_each_occurrences_own_identity(env):
    line = f"echo $CHRONO_RUN_ID $CHRONO_SCHEDULED_AT >> {env['w']}"
    d = start(env, job("hourly", "0 * * * *", line, idempotency_class="keyed"))
    store = SqlStore(env["db"])
    registered_since(store, hours_ago(24))
    t1, t2 = hours_ago(5), hours_ago(1)
    store.insert_runs([past_run("hourly", hours_ago(4), "succeeded"), past_run("hourly", hours_ago(3), "failed")])

    plan = chronoctl(
        "backfill", "hourly", "--from", t1.isoformat(), "--to", t2.isoformat(), "--dry-run", "--json", db=env["db"]
    )
    assert plan.returncode == 0, plan.stderr
    would = json.loads(plan.stdout)["would_run"]
    expected = [hours_ago(n) for n in (5, 3, 2, 1)]  # 4 hours ago succeeded
    assert [w["run_id"] for w in would] == [run_id("hourly", at) for at in expected]
    assert [w["was"] for w in would] == ["no_record", "failed", "no_record", "no_record"]

    res = chronoctl("backfill", "hourly", "--from", t1.isoformat(), "--to", t2.isoformat(), "--json", db=env["db"])
    d.stop()
    assert res.returncode == 0, res.stderr + res.stdout
    done = json.loads(res.stdout)
    assert done["state"] == "done" and done["progress"]["succeeded"] == 4
    witnessed = [tuple(x.split()) for x in env["w"].read_text().splitlines()]
    assert witnessed == [(run_id("hourly", at), utc_stamp(at)) for at in expected]
    again = store.get_run(run_id("hourly", hours_ago(3)))
    assert (again.state, again.trigger, again.attempts) == ("succeeded", "backfill", 2)
    assert [a.state for a in store.attempts(again.run_id)] == [
        "succeeded"
    ]  # the first attempt's row was never stored here
    missed = chronoctl("missed", "--since", "6h", "--json", db=env["db"])
    reported = {m["run_id"] for o in json.loads(missed.stdout)["owners"] for m in o["missed"]}
    assert not reported & {run_id("hourly", at) for at in [*expected, hours_ago(4)]}
    said = chronoctl("did-it-run", "hourly", "--at", hours_ago(5).isoformat(), db=env["db"])
    assert said.returncode == 0 and "run by a backfill" in said.stdout
    store.close()


def test_an_unsafe_job_is_refused_without_allow_unsafe_and_a_reason(env):
    from chronod.core.model import JobSpec

    store = SqlStore(env["db"])
    store.upgrade()
    store.sync_jobs(
        "n1", [JobSpec(id="pay", owner="t", schedule="0 * * * *", command="true", idempotency_class="unsafe")]
    )
    store.close()
    args = ("backfill", "pay", "--from", "-3h", "--to", "now", "--only", "all", "--dry-run")
    res = chronoctl(*args, db=env["db"])
    assert res.returncode == 1 and "--allow-unsafe" in res.stderr and "Traceback" not in res.stderr
    res = chronoctl(*args, "--allow-unsafe", "--reason", "INC-9: the owner checked the ledger", db=env["db"])
    assert res.returncode == 0, res.stderr


def test_a_backfill_survives_a_kill_9_of_chronod_in_its_middle(env):
    line = f"echo $CHRONO_RUN_ID >> {env['w']}; sleep 0.5"
    d = start(env, job("hourly", "0 * * * *", line))
    t1, t2 = hours_ago(4), hours_ago(1)
    res = chronoctl(
        "backfill",
        "hourly",
        "--from",
        t1.isoformat(),
        "--to",
        t2.isoformat(),
        "--only",
        "all",
        "--no-wait",
        "--json",
        db=env["db"],
    )
    assert res.returncode == 0, res.stderr
    wait_until(lambda: env["w"].exists() and len(env["w"].read_text().split()) >= 2, timeout=10, what="two started")
    d.kill9()
    status = json.loads(chronoctl("status", "hourly", "--json", db=env["db"]).stdout)
    assert status["backfills"] and status["backfills"][0]["state"] == "running"
    d.start()
    store = SqlStore(env["db"])
    bf_id = json.loads(res.stdout)["id"]
    wait_until(lambda: store.get_backfill(bf_id).state == "done", timeout=15, what="the backfill to finish")
    d.stop()
    ids = [run_id("hourly", hours_ago(n)) for n in (4, 3, 2, 1)]
    assert sorted(env["w"].read_text().split()) == sorted(ids)  # each once: none lost, none twice
    assert {store.get_run(r).state for r in ids} == {"succeeded"}
    store.close()


def test_a_paused_jobs_backfill_waits_and_ends_cancelled_when_the_job_is_removed(env):
    import signal

    d = start(env, job("hourly", "0 * * * *", f"echo ran >> {env['w']}"))
    chronoctl("pause", "hourly", "--reason", "INC-1: upstream down", db=env["db"], check=True)
    args = ("--from", hours_ago(3).isoformat(), "--to", hours_ago(1).isoformat(), "--only", "all")
    res = chronoctl("backfill", "hourly", *args, "--no-wait", "--json", db=env["db"])
    assert res.returncode == 0, res.stderr
    bf_id = json.loads(res.stdout)["id"]
    status = chronoctl("status", db=env["db"])
    assert f"backfill {bf_id} [" in status.stdout and "0/3 done" in status.stdout
    (env["reg"] / "a.yaml").unlink()
    d.send(signal.SIGHUP)
    store = SqlStore(env["db"])
    wait_until(lambda: store.get_backfill(bf_id).state == "cancelled", timeout=10, what="the backfill to end")
    d.stop()
    assert store.get_backfill(bf_id).error == "its job was removed from the registry"
    assert not env["w"].exists()  # nothing ran while the job was paused
    store.close()


def test_a_backfill_held_by_a_timed_pause_of_its_tag_waits_with_a_progress_bar_then_runs(env):
    from tests.integration.test_console_terminal import in_terminal

    d = start(env, job("hourly", "0 * * * *", f"echo $CHRONO_RUN_ID >> {env['w']}", tags=["reports"]))
    store = SqlStore(env["db"])
    until = datetime.now(timezone.utc) + timedelta(seconds=3)
    store.set_group_pause("tag", "reports", "INC-2: deploy", by="ops", until=until)
    args = ("--from", hours_ago(2).isoformat(), "--to", hours_ago(1).isoformat(), "--only", "all")
    code, screen = in_terminal("backfill", "hourly", *args, db=env["db"], tz="UTC")
    d.stop()
    assert code == 0, screen
    assert "[" + "." * 30 + "] 0/2 done" in screen and "[" + "#" * 30 + "] 2/2 done" in screen
    assert "backfill 1 of hourly done: 2 succeeded, 0 did not, of 2" in screen
    assert env["w"].read_text().split() == [run_id("hourly", hours_ago(n)) for n in (2, 1)]
    assert store.get_backfill(1).finished_at >= until  # held, not skipped
    store.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_in_a_fleet_a_backfill_goes_on_when_the_node_driving_it_is_killed(tmp_path, new_pg_database):
    from tests.integration.test_fleet import WITNESS, Fleet

    fleet = Fleet(tmp_path, new_pg_database())
    # the first run holds until its driver is killed: on a loaded host a 0.5 s run let the
    # driver finish the whole backfill before the kill, and the survivor had nothing to go on with
    release = tmp_path / "release"
    hold = f"; while [ ! -e {release} ]; do sleep 0.1; done"
    try:
        write_jobs(fleet.reg / "a.yaml", jobs_file(job("hourly", "0 * * * *", WITNESS.format(w=fleet.w) + hold)))
        for n in ("a", "b"):
            fleet.start(n)
        args = ("--from", hours_ago(4).isoformat(), "--to", hours_ago(1).isoformat(), "--only", "all")
        res = chronoctl("backfill", "hourly", *args, "--no-wait", "--json", db=fleet.db)
        assert res.returncode == 0, res.stderr
        bf_id = json.loads(res.stdout)["id"]
        first = wait_until(lambda: fleet.witness(), timeout=20, what="the first backfilled run")
        driver = first[0][2]
        fleet.nodes[driver].kill9()
        release.touch()
        store = SqlStore(fleet.db)
        try:
            wait_until(lambda: store.get_backfill(bf_id).state == "done", timeout=30, what="the backfill to finish")
            ids = [run_id("hourly", hours_ago(n)) for n in (4, 3, 2, 1)]
            assert {store.get_run(r).state for r in ids} == {"succeeded"}
        finally:
            store.close()
        ran = {line[0] for line in fleet.witness()}
        survivor = "b" if driver == "a" else "a"
        assert ran == set(ids) and any(line[2] == survivor for line in fleet.witness())
    finally:
        fleet.stop_all()
        fleet.kill_jobs()


def test_a_cancelled_backfill_starts_nothing_more_and_its_running_occurrence_finishes(env):
    gate = env["w"].with_name("gate")  # the first run holds until the cancel is through, however slow the host
    d = start(
        env, job("hourly", "0 * * * *", f"until [ -e {gate} ]; do sleep 0.05; done; echo $CHRONO_RUN_ID >> {env['w']}")
    )
    store = SqlStore(env["db"])
    try:
        oldest = hours_ago(3)  # once: the hour may turn during the test
        args = ("--from", oldest.isoformat(), "--to", (oldest + timedelta(hours=2)).isoformat(), "--only", "all")
        res = chronoctl("backfill", "hourly", *args, "--no-wait", "--json", db=env["db"])
        assert res.returncode == 0, res.stderr
        bf_id = json.loads(res.stdout)["id"]
        first = run_id("hourly", oldest)
        wait_until(lambda: (store.get_run(first) or {}) and store.get_run(first).state == "running", timeout=30)
        res = chronoctl("backfill", "--cancel", str(bf_id), "--reason", "wrong range", db=env["db"])
        assert res.returncode == 0, res.stderr
        assert f"backfill {bf_id} of hourly cancelled" in res.stdout and "wrong range" in res.stdout
        status = chronoctl("status", db=env["db"]).stdout
        assert f"backfill {bf_id} [" in status and "CANCELLED" in status and "wrong range" in status
        assert json.loads(chronoctl("status", "hourly", "--json", db=env["db"]).stdout)["backfills"][0]["state"] == (
            "cancelled"
        )
        gate.touch()
        wait_until(lambda: store.get_run(first).state == "succeeded", timeout=30, what="the running one to finish")
        again = chronoctl("backfill", "--cancel", "hourly", "--json", db=env["db"])
        assert again.returncode == 1 and json.loads(again.stdout)["cancelled"] == []
    finally:
        d.stop()
    bf = store.get_backfill(bf_id)
    assert bf.state == "cancelled" and bf.started == 1  # the store opens nothing once cancelled
    assert env["w"].read_text().split() == [first]
    store.close()


def test_backfill_cancel_takes_no_range_and_an_unknown_id_is_a_usage_error(env):
    res = chronoctl("backfill", "hourly", "--cancel", "1", db=env["db"])
    assert res.returncode == 2 and "--cancel" in res.stderr and "Traceback" not in res.stderr
    SqlStore(env["db"]).upgrade()
    res = chronoctl("backfill", "--cancel", "42", db=env["db"])
    assert res.returncode == 2 and "no backfill 42" in res.stderr
    res = chronoctl("backfill", "hourly", db=env["db"])
    assert res.returncode == 2 and "--from" in res.stderr


def test_a_backfill_never_makes_the_live_schedule_skip_under_forbid(env):
    """The schedule comes first: an every-2-s job that forbids overlap, runs of 1.5 s, a
    backfill of its last occurrences; the occurrences that fall due meanwhile wait for the
    backfilled run going and start, none is recorded skipped_overlap behind it."""
    line = f"echo $CHRONO_RUN_ID start >> {env['w']}; sleep 1.5; echo $CHRONO_RUN_ID end >> {env['w']}"
    d = start(env, job("every2", "@every 2s", line, overlap="forbid", catchup="latest"))
    store = SqlStore(env["db"])
    try:
        wait_until(lambda: len(store.runs("every2")) >= 6, timeout=20, what="six scheduled occurrences")
        res = chronoctl(
            "backfill", "every2", "--from", "-12s", "--to", "-2s", "--only", "all", "--no-wait", "--json", db=env["db"]
        )
        assert res.returncode == 0, res.stderr
        bf_id = json.loads(res.stdout)["id"]
        wait_until(lambda: store.get_backfill(bf_id).state == "done", timeout=30, what="the backfill to finish")
        bf = store.get_backfill(bf_id)
        d.stop()
        during = [
            r for r in store.runs("every2") if r.trigger == "schedule" and bf.created_at <= r.fire_at <= bf.finished_at
        ]
        assert len(during) >= 2
        every = {r.run_id: r for r in store.runs("every2")}
        skipped = [r for r in during if r.state == "skipped_overlap"]
        # forbid still skips behind a scheduled run, never behind a backfilled one
        behind = [r for r in skipped if every[(r.error or "").split()[2].rstrip(",")].trigger != "schedule"]
        assert not behind, [(r.scheduled_at, r.error) for r in behind]
        assert any(r.state == "succeeded" for r in during)
        # one at a time: every start follows the previous run's end (overlap: forbid)
        events = [ln.split() for ln in env["w"].read_text().splitlines()]
        going: set[str] = set()
        for rid, what in events:
            if what == "start":
                assert not going, f"{rid} started while {going} ran"
                going.add(rid)
            else:
                going.discard(rid)
    finally:
        store.close()
