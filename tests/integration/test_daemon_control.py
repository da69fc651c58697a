"""chronod under an operator's hands: stalls, reloads, pause, trigger, systemd notify."""

from __future__ import annotations

import signal
import socket
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, runs_json, wait_until, write_jobs
from tests.integration.test_daemon import by_scheduled, parse


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


def daemon(env, **kw) -> Chronod:
    return Chronod(env["reg"], env["db"], env["log"], **kw)


def test_a_stalled_daemon_catches_up_by_policy_when_it_continues(env):
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("tick", "@every 1s", "true", catchup="latest")))
    d = daemon(env).start()
    time.sleep(1.2)
    d.send(signal.SIGSTOP)
    stalled_from = datetime.now(timezone.utc)
    time.sleep(4)
    d.send(signal.SIGCONT)
    resumed = datetime.now(timezone.utc)

    def stalled() -> list[dict]:
        runs = by_scheduled(runs_json("tick", env["db"]))
        return [
            r
            for s, r in runs.items()
            if stalled_from + timedelta(seconds=1) < parse(s) < resumed - timedelta(seconds=1)
        ]

    # once it continues (how soon depends on the host's load): the occurrences of the stall
    # are settled by the policy, and the schedule runs on
    wait_until(
        lambda: len(stalled()) >= 2 and all(r["state"] not in ("pending", "running") for r in stalled()),
        timeout=30,
        what="the stalled occurrences to be settled",
    )
    wait_until(
        lambda: any(
            parse(r["scheduled_at"]) > resumed and r["state"] == "succeeded" for r in runs_json("tick", env["db"])
        ),
        timeout=30,
        what="a run after the stall",
    )
    d.stop()
    assert Counter(r["state"] for r in stalled()) == {"skipped_outage": len(stalled())}, stalled()


def test_systemd_hears_ready_and_stopping(env, tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(20)
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("x", "@every 1h", "true")))
    d = Chronod(env["reg"], env["db"], env["log"], env={"NOTIFY_SOCKET": path}).start()
    first = sock.recv(4096).decode()
    d.stop()
    messages = [first]
    sock.settimeout(5)
    try:
        while True:
            messages.append(sock.recv(4096).decode())
    except socket.timeout:
        pass
    sock.close()
    assert "READY=1" in first and "STATUS=1 jobs" in first
    assert any("STOPPING=1" in m for m in messages)


def test_a_removed_job_has_its_pending_occurrence_cancelled_and_keeps_its_history(env):
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("gone", "@every 1s", "true")))
    write_jobs(env["reg"] / "b.yaml", jobs_file(job("stays", "@every 1h", "true")))
    d = daemon(env).start()
    wait_until(lambda: any(r["state"] == "succeeded" for r in runs_json("gone", env["db"])), what="a run")
    (env["reg"] / "a.yaml").unlink()
    wait_until(lambda: "event=job.removed" in d.log_since_start(), what="the reload")
    # a run started just before the removal ends, and nothing of the job is left to run
    wait_until(
        lambda: not [r for r in runs_json("gone", env["db"]) if r["state"] in ("pending", "running")],
        timeout=15,
        what="no pending or running occurrence of the removed job",
    )
    d.stop()
    runs = runs_json("gone", env["db"])
    assert not [r for r in runs if r["state"] in ("pending", "running")]
    assert any(r["state"] == "cancelled" and "removed" in (r["error"] or "") for r in runs)
    assert any(r["state"] == "succeeded" for r in runs)


def test_a_paused_job_records_skipped_paused_until_it_is_resumed(env):
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("p", "@every 1s", "true")))
    d = daemon(env).start()
    chronoctl("pause", "p", "--reason", "maintenance window", db=env["db"], check=True)
    paused = wait_until(
        lambda: [r for r in runs_json("p", env["db"]) if r["state"] == "skipped_paused"],
        timeout=30,
        what="an occurrence skipped while paused",
    )
    chronoctl("resume", "p", db=env["db"], check=True)
    resumed = datetime.now(timezone.utc)
    wait_until(
        lambda: [
            r for r in runs_json("p", env["db"]) if parse(r["scheduled_at"]) > resumed and r["state"] == "succeeded"
        ],
        timeout=30,
        what="a run after the resume",
    )
    d.stop()
    assert "maintenance window" in paused[0]["error"]


def test_a_manual_trigger_runs_at_once_with_its_own_run_id(env):
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("m", "@every 1h", f"echo $CHRONO_RUN_ID >> {env['w']}")))
    d = daemon(env).start()
    res = chronoctl("trigger", "m", "--json", db=env["db"])
    assert res.returncode == 0, res.stderr + res.stdout
    wait_until(lambda: env["w"].exists() and env["w"].read_text().strip(), timeout=10, what="the triggered run")
    manual = wait_until(lambda: [r for r in runs_json("m", env["db"]) if r["state"] == "succeeded"], what="record")
    d.stop()
    assert manual[0]["run_id"] == env["w"].read_text().split()[0]
    assert manual[0]["trigger"].startswith("manual")


def test_a_job_removed_and_added_back_before_its_next_occurrence_still_runs_it(env):
    spec = jobs_file(job("back", "@every 6s", f"echo $CHRONO_RUN_ID >> {env['w']}"))
    write_jobs(env["reg"] / "a.yaml", spec)
    d = daemon(env).start()
    wait_until(lambda: env["w"].exists(), timeout=10, what="a first run")
    (env["reg"] / "a.yaml").unlink()
    wait_until(lambda: "event=job.removed" in d.log_since_start(), what="the removal")
    added = datetime.now(timezone.utc)
    write_jobs(env["reg"] / "a.yaml", spec)
    wait_until(lambda: d.log_since_start().count("event=registry.reloaded") >= 2, what="the re-add")
    line = [l for l in d.log_since_start().splitlines() if "event=registry.reloaded" in l][1]
    loaded = datetime.fromisoformat(line.split()[0])
    # the first occurrence after the re-add (within one period of the reload) runs
    nxt = wait_until(
        lambda: [
            r
            for r in runs_json("back", env["db"])
            if added < parse(r["scheduled_at"]) <= loaded + timedelta(seconds=6)
            and r["state"] not in ("pending", "running")
        ],
        timeout=30,
        what="the occurrence after the re-add to end",
    )
    d.stop()
    ran = env["w"].read_text().split()
    assert nxt[0]["state"] == "succeeded" and nxt[0]["run_id"] in ran, (
        "the occurrence after the re-add did not run",
        nxt,
    )
    runs = {r["run_id"]: r for r in runs_json("back", env["db"])}
    assert all(runs[rid]["state"] in ("succeeded", "running") for rid in ran)
