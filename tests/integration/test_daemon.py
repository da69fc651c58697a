"""chronod as a user runs it: real daemon, real jobs, history read back through chronoctl."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import (
    Chronod,
    chronoctl,
    free_port,
    job,
    jobs_file,
    runs_json,
    wait_until,
    write_jobs,
    write_once_soon,
)

TERMINAL = {
    "succeeded",
    "failed",
    "timed_out",
    "cancelled",
    "skipped_overlap",
    "skipped_outage",
    "skipped_paused",
    "lost",
}


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


def daemon(env, *extra) -> Chronod:
    return Chronod(env["reg"], env["db"], env["log"], *extra)


def once_soon(env, d: Chronod, job_id: str, command: str, delay_s: float = 2, **fields) -> None:
    """Give the running daemon `d` a job that fires once, about `delay_s` from now."""
    make = lambda schedule: jobs_file(job(job_id, schedule, command, **fields))  # noqa: E731
    write_once_soon(env["reg"] / "a.yaml", make, job_id, [d], env["db"], delay_s=delay_s)


def by_scheduled(runs: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in runs:
        assert r["scheduled_at"] not in out, f"two runs for one occurrence: {r} and {out[r['scheduled_at']]}"
        out[r["scheduled_at"]] = r
    return out


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


def test_overlap_forbid_records_skipped_overlap_and_timeout_records_timed_out(env):
    write_jobs(
        env["reg"] / "a.yaml",
        jobs_file(
            job("slow", "@every 1s", "sleep 2.5", overlap="forbid"),
            job("hang", "@every 3s", "trap '' TERM; sleep 30", timeout_s=1, kill_grace_s=1, overlap="allow"),
        ),
    )
    d = daemon(env).start()
    # however loaded the host: a 2.5 s run of a 1 s job makes the next ones skipped_overlap,
    # and the hung job is killed once its timeout and grace have passed
    wait_until(
        lambda: Counter(r["state"] for r in runs_json("slow", env["db"]))["skipped_overlap"] >= 2,
        timeout=30,
        what="two skipped_overlap runs of slow",
    )
    slow_done = wait_until(
        lambda: [r for r in runs_json("slow", env["db"]) if r["state"] == "succeeded"],
        timeout=30,
        what="a run of slow to succeed",
    )
    hang = wait_until(
        lambda: [r for r in runs_json("hang", env["db"]) if r["state"] == "timed_out"],
        timeout=30,
        what="hang to time out",
    )
    d.stop()
    skipped = [r for r in runs_json("slow", env["db"]) if r["state"] == "skipped_overlap"]
    assert slow_done and all("still running" in r["error"] for r in skipped), skipped
    assert hang[0]["signal"] == signal.SIGKILL


def test_a_job_printing_50_mb_keeps_only_the_tail_and_the_daemon_memory_flat(env):
    cmd = "head -c 52428800 /dev/zero | tr '\\000' x; echo; echo THE-END"
    d = daemon(env).start()

    def rss() -> int:
        status = Path(f"/proc/{d.proc.pid}/status").read_text().splitlines()
        return int(next(l for l in status if l.startswith("VmRSS")).split()[1])

    once_soon(env, d, "loud", cmd, output_limit_kb=16, delay_s=4)
    before = rss()  # the job file read, the job not yet started (on all but the slowest host)
    runs = wait_until(
        lambda: [r for r in runs_json("loud", env["db"]) if r["state"] == "succeeded"],
        timeout=30,
        what="the loud job to finish",
    )
    after = rss()
    d.stop()
    assert runs[0]["output_bytes"] == 52428800 + len("\nTHE-END\n")
    logs = chronoctl("logs", runs[0]["run_id"], db=env["db"], check=True).stdout
    assert "THE-END" in logs and len(logs) <= 17 * 1024
    assert after - before < 10 * 1024, f"daemon RSS grew from {before} kB to {after} kB"


def test_kill_9_at_random_moments_loses_no_occurrence_and_never_reruns_an_unsafe_one(env):
    w_unsafe, w_idem = env["tmp"] / "unsafe", env["tmp"] / "idem"
    write_jobs(
        env["reg"] / "a.yaml",
        jobs_file(
            job(
                "unsafe-job",
                "@every 1s",
                f"echo $CHRONO_RUN_ID >> {w_unsafe}; sleep 0.4",
                idempotency_class="unsafe",
                overlap="allow",
                catchup="all",
            ),
            job(
                "idem-job",
                "@every 1s",
                f"sleep 0.3; echo $CHRONO_RUN_ID $CHRONO_ATTEMPT >> {w_idem}",
                overlap="allow",
                catchup="all",
            ),
        ),
    )
    rng = random.Random(20261202)
    for i in range(10):
        d = daemon(env).start()
        if i == 0:  # the jobs are registered before READY: their first occurrence is within 1 s
            ready = datetime.now(timezone.utc)
        time.sleep(rng.uniform(0.2, 1.5))
        d.kill9()
    d = daemon(env).start()
    time.sleep(2)
    d.stop()
    end = datetime.now(timezone.utc)
    d = daemon(env).start()  # records what the last stop left behind, once it has ended

    def due_runs(name: str) -> list[dict]:
        runs = by_scheduled(runs_json(name, env["db"]))
        return [runs[s] for s in sorted(runs, key=parse) if parse(runs[s]["fire_at"]) < end - timedelta(seconds=0.5)]

    wait_until(
        lambda: all(r["state"] in TERMINAL for name in ("unsafe-job", "idem-job") for r in due_runs(name)),
        timeout=30,
        what="every occurrence due before the last stop to be settled",
    )
    d.stop()
    unsafe_ran = w_unsafe.read_text().split()
    assert len(unsafe_ran) == len(set(unsafe_ran)), "an unsafe occurrence ran twice"
    for name in ("unsafe-job", "idem-job"):
        runs = due_runs(name)
        due = [parse(r["scheduled_at"]) for r in runs]
        assert due[0] <= ready + timedelta(seconds=1), f"{name}: the first occurrence has no record: {due[0]}"
        gaps = [(b - a).total_seconds() for a, b in zip(due, due[1:])]
        assert gaps == [1.0] * len(gaps), f"{name}: an occurrence has no record: {gaps}"
        states = Counter(r["state"] for r in runs)
        assert set(states) <= TERMINAL, f"{name}: {states}"
    unsafe_runs = {r["run_id"]: r for r in runs_json("unsafe-job", env["db"])}
    ran_states = Counter(unsafe_runs[rid]["state"] for rid in unsafe_ran)
    assert set(ran_states) <= {"succeeded", "lost", "running"}, ran_states


def test_sigterm_leaves_the_job_running_and_the_next_start_records_its_real_exit_status(env):
    d = daemon(env).start()
    release = env["tmp"] / "release"  # the job runs until released, however slow the machine
    once_soon(env, d, "long", f"while [ ! -e {release} ]; do sleep 0.1; done; exit 7")
    wait_until(
        lambda: any(r["state"] == "running" for r in runs_json("long", env["db"])), timeout=10, what="the job to start"
    )
    try:
        assert d.stop() == 0
        running = [r for r in runs_json("long", env["db"]) if r["state"] == "running"]
        assert len(running) == 1
    finally:
        release.touch()
    # the job ends while no chronod is up: its supervisor writes the result file
    state = Path(env["db"] + ".state")
    wait_until(lambda: list(state.glob(f"{running[0]['run_id']}*.result.json")), timeout=15, what="the job's result")
    d = daemon(env).start()
    d.stop()
    final = {r["run_id"]: r for r in runs_json("long", env["db"])}[running[0]["run_id"]]
    assert (final["state"], final["exit_code"], final["attempts"]) == ("failed", 7, 1)


def test_a_running_job_is_adopted_by_the_next_daemon_and_its_end_recorded(env):
    d = daemon(env).start()
    release = env["tmp"] / "release"  # the job runs until adopted, however slow the machine
    once_soon(env, d, "long", f"while [ ! -e {release} ]; do sleep 0.1; done; exit 0")
    wait_until(
        lambda: any(r["state"] == "running" for r in runs_json("long", env["db"])), timeout=10, what="the job to start"
    )
    try:
        d.kill9()
        d = daemon(env).start()
        assert "event=run.adopted" in d.log_since_start()
    finally:
        release.touch()
    run = wait_until(
        lambda: [r for r in runs_json("long", env["db"]) if r["state"] == "succeeded"],
        timeout=10,
        what="the adopted run to finish",
    )[0]
    d.stop()
    assert run["attempts"] == 1


def test_a_second_chronod_on_the_same_sqlite_database_refuses_to_start(env):
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("x", "@every 1h", "true")))
    first = daemon(env).start()
    second = daemon(env).start(wait_ready=False)
    rc = second.proc.wait(20)
    first.stop()
    assert rc != 0
    assert "another chronod" in second.log_since_start()


def test_reloads_of_unchanged_files_keep_every_occurrence_and_a_changed_file_still_applies(env):
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("tick", "@every 1s", f"echo $CHRONO_RUN_ID >> {env['w']}")))
    write_jobs(env["reg"] / "b.yaml", jobs_file(job("later", "0 4 * * *", "true")))
    d = daemon(env).start()
    for _ in range(6):
        d.send(signal.SIGHUP)
        time.sleep(0.4)
    wait_until(lambda: d.log_since_start().count("event=registry.reloaded") >= 1, what="a reload")
    write_jobs(env["reg"] / "b.yaml", jobs_file(job("later", "0 5 * * *", "true")))
    wait_until(
        lambda: any(
            r["scheduled_at"].endswith("05:00:00+00:00") and r["state"] == "pending"
            for r in runs_json("later", env["db"], since="2d")
        ),
        what="the changed schedule",
    )
    wait_until(lambda: len(runs_json("tick", env["db"])) >= 5, what="a few ticks across the reloads")
    cut = datetime.now(timezone.utc) - timedelta(seconds=0.5)

    def due_by_cut() -> list[dict]:
        return [r for r in by_scheduled(runs_json("tick", env["db"])).values() if parse(r["fire_at"]) < cut]

    # a run that fell due just before the cut may still be running on a loaded host
    wait_until(
        lambda: all(r["state"] not in ("pending", "running") for r in due_by_cut()),
        timeout=30,
        what="the ticks due before the cut to end",
    )
    assert d.stop() == 0
    runs = by_scheduled(runs_json("tick", env["db"]))
    due = sorted(parse(s) for s, r in runs.items() if parse(r["fire_at"]) < cut)
    assert len(due) >= 3
    assert [(b - a).total_seconds() for a, b in zip(due, due[1:])] == [1.0] * (len(due) - 1)
    # each ran, but where a run outlived its 1 s period on a loaded host and the next was
    # skipped_overlap for it (the default `overlap: forbid`); never cancelled by a reload
    states = [(runs[s.isoformat()]["state"], runs[s.isoformat()]["error"]) for s in due]
    assert all(st == "succeeded" or (st == "skipped_overlap" and "previous run" in err) for st, err in states), states
    assert any(st == "succeeded" for st, _ in states), states
    witness = env["w"].read_text().split()
    assert len(witness) == len(set(witness)), "a run id ran twice"
    later = [r for r in runs_json("later", env["db"], since="2d") if r["state"] == "pending"]
    assert len(later) == 1, later


def test_a_bad_file_keeps_its_last_good_version_and_the_error_is_shown(env):
    write_jobs(env["reg"] / "good.yaml", jobs_file(job("keep", "@every 1s", "true")))
    write_jobs(env["reg"] / "other.yaml", jobs_file(job("other", "@every 1s", "true")))
    port = free_port()
    d = daemon(env, "--metrics-addr", f"127.0.0.1:{port}").start()
    write_jobs(env["reg"] / "other.yaml", "jobs:\n  - id: other\n    schedul: nope\n")
    wait_until(lambda: "event=registry.kept_last_good" in d.log_since_start(), timeout=10, what="a reload")
    before = len(runs_json("other", env["db"]))
    # the last good version of other.yaml keeps running: new runs of `other` after the bad edit
    after = wait_until(
        lambda: (
            (rows := runs_json("other", env["db"]))
            and len(rows) > before
            and len([r for r in rows if r["state"] == "succeeded"]) >= 2
            and rows
        ),
        timeout=30,
        what="runs of the kept version",
    )
    wait_until(
        lambda: any(r["state"] == "succeeded" for r in runs_json("keep", env["db"])), timeout=30, what="a run of keep"
    )
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
    with pytest.raises(urllib.error.HTTPError) as other_path:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    status = chronoctl("status", "--json", db=env["db"])
    d.stop()
    assert len([r for r in after if r["state"] == "succeeded"]) >= 2 and len(after) > before
    assert "chrono_registry_errors 1.0" in metrics
    assert 'chrono_runs_total{job="keep",state="succeeded"}' in metrics
    assert "\nchrono_dispatch_rejected_stale_token_total " in metrics
    assert not [l for l in metrics.splitlines() if l and not l.startswith(("#", "chrono_", "python_", "process_"))]
    assert health.status == 200 and other_path.value.code == 404
    assert "other.yaml" in status.stdout and "schedul" in status.stdout


def test_missed_occurrences_after_downtime_follow_the_catchup_policy(env):
    write_jobs(
        env["reg"] / "a.yaml",
        jobs_file(
            job("latest", "@every 1s", "true", catchup="latest"),
            job("none", "@every 1s", "true", catchup="none"),
        ),
    )
    d = daemon(env).start()
    time.sleep(1.5)
    d.stop()
    down_from = datetime.now(timezone.utc)
    # 5.5 s down leaves a window of at least 3.5 s between the two margins below: three
    # whole-second occurrences at least, however slowly the daemon comes back up.
    time.sleep(5.5)
    # every occurrence before the new daemon was launched was missed; under `latest` the
    # last of them (within 1 s of the launch) runs, the others are skipped. The margin is
    # taken from the launch, not from READY, which a loaded host may hold back for seconds.
    launched = datetime.now(timezone.utc)
    d = daemon(env).start()

    def gap(name: str) -> list[dict]:
        runs = by_scheduled(runs_json(name, env["db"]))
        return [
            r for s, r in runs.items() if down_from + timedelta(seconds=1) < parse(s) < launched - timedelta(seconds=1)
        ]

    wait_until(
        lambda: all(
            gap(n) and all(r["state"] not in ("pending", "running") for r in gap(n)) for n in ("latest", "none")
        ),
        timeout=30,
        what="the missed occurrences to be settled",
    )
    d.stop()
    for name in ("latest", "none"):
        runs = gap(name)
        assert len(runs) >= 2
        assert all(r["state"] == "skipped_outage" for r in runs), [r["state"] for r in runs]
        assert all("catchup" in r["error"] for r in runs)


def test_a_failed_attempt_is_retried_under_the_same_run_id(env):
    counter = env["tmp"] / "count"
    cmd = (
        f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; "
        f"echo $CHRONO_RUN_ID $CHRONO_ATTEMPT >> {env['w']}; [ $n -ge 1 ]"
    )
    d = daemon(env).start()
    once_soon(env, d, "flaky", cmd, retry={"attempts": 3, "backoff_s": 1, "max_backoff_s": 2})
    run = wait_until(
        lambda: [r for r in runs_json("flaky", env["db"]) if r["state"] == "succeeded"],
        timeout=15,
        what="the retried run to succeed",
    )[0]
    d.stop()
    lines = [l.split() for l in env["w"].read_text().splitlines()]
    assert lines == [[run["run_id"], "1"], [run["run_id"], "2"]]
    assert run["attempts"] == 2


def test_a_reboot_job_runs_once_per_boot_not_once_per_daemon_start(env):
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("boot", "@reboot", f"echo $CHRONO_RUN_ID >> {env['w']}")))
    d = daemon(env).start()
    wait_until(
        lambda: any(r["state"] == "succeeded" for r in runs_json("boot", env["db"], since="3650d")),
        timeout=30,
        what="the @reboot run of the first start",
    )
    d.stop()
    d = daemon(env).start()  # a second start in the same boot: nothing more to run
    time.sleep(1)
    d.stop()
    assert len(env["w"].read_text().split()) == 1


def test_the_shipped_unit_file_passes_systemd_analyze_verify(tmp_path):
    import shutil

    if not shutil.which("systemd-analyze"):
        pytest.skip("SKIPPED LOUDLY: systemd-analyze is not installed")
    unit = Path(__file__).resolve().parents[2] / "contrib" / "systemd" / "chronod.service"
    fake = tmp_path / "chronod.service"
    fake.write_text(unit.read_text().replace("/usr/bin/chronod", str(Path(os.sys.executable).parent / "chronod")))
    res = subprocess.run(["systemd-analyze", "verify", str(fake)], capture_output=True, text=True)
    # the man pages are not installed in a test environment; everything else must be clean
    problems = [l for l in res.stderr.splitlines() if "chronod.service" in l and "Command 'man " not in l]
    assert not problems, res.stderr


def test_chronod_refuses_a_database_newer_than_it_knows_and_names_the_fix(env):
    import sqlite3

    write_jobs(env["reg"] / "a.yaml", jobs_file(job("x", "@every 1h", "true")))
    daemon(env).start().stop()
    with sqlite3.connect(env["db"]) as c:
        c.execute("UPDATE alembic_version SET version_num = 'ffff_from_the_future'")
    d = daemon(env).start(wait_ready=False)
    rc = d.proc.wait(30)
    assert rc == 78
    assert "newer than this chrono" in d.log_since_start() and "upgrade chrono" in d.log_since_start()
    assert "Traceback" not in d.log_since_start()
