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

from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, runs_json, wait_until, write_jobs

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


def at_second(delay_s: int) -> str:
    """A 6-field schedule that fires once a day, `delay_s` seconds from now (UTC)."""
    t = datetime.now(timezone.utc) + timedelta(seconds=delay_s)
    return f"{t.second} {t.minute} {t.hour} * * *"


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
    time.sleep(6)
    d.stop()
    slow = Counter(r["state"] for r in runs_json("slow", env["db"]))
    assert slow["skipped_overlap"] >= 2 and slow["succeeded"] + slow.get("running", 0) >= 1, slow
    skipped = [r for r in runs_json("slow", env["db"]) if r["state"] == "skipped_overlap"]
    assert "still running" in skipped[0]["error"]
    hang = [r for r in runs_json("hang", env["db"]) if r["state"] == "timed_out"]
    assert hang and hang[0]["signal"] == signal.SIGKILL


def test_a_job_printing_50_mb_keeps_only_the_tail_and_the_daemon_memory_flat(env):
    cmd = "head -c 52428800 /dev/zero | tr '\\000' x; echo; echo THE-END"
    d = daemon(env).start()
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("loud", at_second(2), cmd, output_limit_kb=16)))

    def rss() -> int:
        status = Path(f"/proc/{d.proc.pid}/status").read_text().splitlines()
        return int(next(l for l in status if l.startswith("VmRSS")).split()[1])

    before = rss()
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
    started = datetime.now(timezone.utc)
    for _ in range(10):
        d = daemon(env).start()
        time.sleep(rng.uniform(0.2, 1.5))
        d.kill9()
    d = daemon(env).start()
    time.sleep(2)
    d.stop()
    end = datetime.now(timezone.utc)
    time.sleep(1.0)  # let the last jobs end under their supervisors
    d = daemon(env).start()  # records what the last stop left behind
    time.sleep(1.0)
    d.stop()
    unsafe_ran = w_unsafe.read_text().split()
    assert len(unsafe_ran) == len(set(unsafe_ran)), "an unsafe occurrence ran twice"
    for name in ("unsafe-job", "idem-job"):
        runs = by_scheduled(runs_json(name, env["db"]))
        due = sorted(parse(s) for s, r in runs.items() if parse(r["fire_at"]) < end - timedelta(seconds=0.5))
        first = due[0]
        assert first <= started + timedelta(seconds=6)
        gaps = [(b - a).total_seconds() for a, b in zip(due, due[1:])]
        assert gaps == [1.0] * len(gaps), f"{name}: an occurrence has no record: {gaps}"
        states = Counter(runs[s.isoformat()]["state"] for s in due)
        assert set(states) <= TERMINAL, f"{name}: {states}"
    unsafe_runs = {r["run_id"]: r for r in runs_json("unsafe-job", env["db"])}
    ran_states = Counter(unsafe_runs[rid]["state"] for rid in unsafe_ran)
    assert set(ran_states) <= {"succeeded", "lost", "running"}, ran_states


def test_sigterm_leaves_the_job_running_and_the_next_start_records_its_real_exit_status(env):
    d = daemon(env).start()
    release = env["tmp"] / "release"  # the job runs until released, however slow the machine
    write_jobs(
        env["reg"] / "a.yaml",
        jobs_file(job("long", at_second(2), f"while [ ! -e {release} ]; do sleep 0.1; done; exit 7")),
    )
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
    write_jobs(
        env["reg"] / "a.yaml",
        jobs_file(job("long", at_second(2), f"while [ ! -e {release} ]; do sleep 0.1; done; exit 0")),
    )
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
    stopped_at = datetime.now(timezone.utc)
    assert d.stop() == 0
    runs = by_scheduled(runs_json("tick", env["db"]))
    due = sorted(parse(s) for s, r in runs.items() if parse(r["fire_at"]) < stopped_at - timedelta(seconds=0.5))
    assert len(due) >= 3
    assert [(b - a).total_seconds() for a, b in zip(due, due[1:])] == [1.0] * (len(due) - 1)
    assert all(runs[s.isoformat()]["state"] == "succeeded" for s in due), [runs[s.isoformat()] for s in due]
    witness = env["w"].read_text().split()
    assert len(witness) == len(set(witness)), "a run id ran twice"
    later = [r for r in runs_json("later", env["db"], since="2d") if r["state"] == "pending"]
    assert len(later) == 1, later


def test_a_bad_file_keeps_its_last_good_version_and_the_error_is_shown(env):
    write_jobs(env["reg"] / "good.yaml", jobs_file(job("keep", "@every 1s", "true")))
    write_jobs(env["reg"] / "other.yaml", jobs_file(job("other", "@every 1s", "true")))
    port = 20000 + os.getpid() % 20000
    d = daemon(env, "--metrics-addr", f"127.0.0.1:{port}").start()
    write_jobs(env["reg"] / "other.yaml", "jobs:\n  - id: other\n    schedul: nope\n")
    wait_until(lambda: "event=registry.kept_last_good" in d.log_since_start(), timeout=10, what="a reload")
    before = len(runs_json("other", env["db"]))
    time.sleep(2.2)
    after = runs_json("other", env["db"])
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
    # 5.5 s down leaves a window of at least 3 s between the two margins below: two
    # whole-second occurrences at least, however fast the daemon comes back up.
    time.sleep(5.5)
    d = daemon(env).start()
    up_at = datetime.now(timezone.utc)
    time.sleep(1)
    d.stop()
    for name in ("latest", "none"):
        runs = by_scheduled(runs_json(name, env["db"]))
        gap = [
            r for s, r in runs.items() if down_from + timedelta(seconds=1) < parse(s) < up_at - timedelta(seconds=1.5)
        ]
        assert len(gap) >= 2
        assert all(r["state"] == "skipped_outage" for r in gap), [r["state"] for r in gap]
        assert all("catchup" in r["error"] for r in gap)


def test_a_failed_attempt_is_retried_under_the_same_run_id(env):
    counter = env["tmp"] / "count"
    cmd = (
        f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; "
        f"echo $CHRONO_RUN_ID $CHRONO_ATTEMPT >> {env['w']}; [ $n -ge 1 ]"
    )
    d = daemon(env).start()
    write_jobs(
        env["reg"] / "a.yaml",
        jobs_file(job("flaky", at_second(2), cmd, retry={"attempts": 3, "backoff_s": 1, "max_backoff_s": 2})),
    )
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
    for _ in range(2):
        d = daemon(env).start()
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
