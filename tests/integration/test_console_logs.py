"""`chronoctl logs` on real runs: a running run's output so far, `--follow` streaming each
line within a second of its printing and exiting with the run's outcome, and every
attempt of a retried run keeping its own output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from chronod.store.api import open_store
from tests.integration.daemon_helpers import BIN, Chronod, chronoctl, job, jobs_file, runs_json, wait_until, write_jobs

# Prints its own clock with each line, so the reader can tell how late each line reached it.
# After line 1 it waits for `go`: the reader is up (line 1 reached it) before the rest is
# printed, however long a loaded host takes to start `chronoctl logs --follow`.
TICKER = (
    'echo "line 1 $(date +%s.%N)"; while [ ! -e {go} ]; do sleep 0.05; done; '
    'for i in $(seq 2 30); do echo "line $i $(date +%s.%N)"; sleep 0.25; done; exit ${{CODE:-0}}'
)


def _follow(target: str, db: str, go=None) -> tuple[int, list[tuple[float, str]], str]:
    proc = subprocess.Popen(
        [str(BIN / "chronoctl"), "logs", target, "--follow", "--db", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    got = []
    assert proc.stdout is not None
    for line in proc.stdout:
        got.append((time.time(), line.rstrip("\n")))
        if go is not None:
            go.touch()
    rc = proc.wait(60)
    return rc, got, proc.stderr.read() if proc.stderr else ""


@pytest.mark.slow
@pytest.mark.parametrize("code, outcome", [(0, 0), (3, 1)])
def test_follow_streams_each_line_within_a_second_and_exits_with_the_outcome(tmp_path, code, outcome):
    reg, db = tmp_path / "jobs.d", str(tmp_path / "chrono.db")
    reg.mkdir()
    go = tmp_path / "go"
    write_jobs(reg / "a.yaml", jobs_file(job("ticker", "@every 1h", f"CODE={code}; {TICKER.format(go=go)}")))
    d = Chronod(reg, db, tmp_path / "chronod.log").start()
    try:
        queued = json.loads(chronoctl("trigger", "ticker", "--json", db=db, check=True).stdout)
        rc, got, err = _follow(queued["run_id"], db, go)  # a run: followed until it ends
    finally:
        go.touch()
        d.stop()
    lines = [(at, text) for at, text in got if text.startswith("line ")]
    assert [t.split()[1] for _, t in lines] == [str(i) for i in range(1, 31)], (got, err)
    # Every line after the first was printed while `--follow` was up. It reads as they come
    # (a 0.2 s poll): the typical line reaches it well within a second. A loaded host may
    # hold one back now and then; a reader that waited a second or more between reads
    # would make the typical line half a second late or more.
    late = sorted(at - float(t.split()[2]) for at, t in lines[1:])
    assert late[len(late) // 2] < 0.5, f"lines reached --follow this late: {late}"
    assert rc == outcome, err
    assert ("succeeded" if code == 0 else "failed") in err


@pytest.mark.slow
def test_a_running_run_shows_its_output_so_far_and_every_attempt_keeps_its_own(tmp_path):
    reg, db = tmp_path / "jobs.d", str(tmp_path / "chrono.db")
    reg.mkdir()
    # The first attempt runs until the test has read its output while it ran; the others end at once.
    release = tmp_path / "release"
    cmd = (
        "n=$(cat n 2>/dev/null || echo 1); echo attempt-$n; echo $((n + 1)) > n; "
        f"if [ $n = 1 ]; then while [ ! -e {release} ]; do sleep 0.1; done; fi; exit 1"
    )
    write_jobs(
        reg / "a.yaml",
        jobs_file(job("flaky", "@every 1h", cmd, workdir=str(tmp_path), retry={"attempts": 3, "backoff_s": 1})),
    )
    d = Chronod(reg, db, tmp_path / "chronod.log").start()
    try:
        chronoctl("trigger", "flaky", db=db, check=True)
        wait_until(lambda: any(r["state"] == "running" for r in runs_json("flaky", db)), what="the run to start")
        res = wait_until(
            lambda: (r := chronoctl("logs", "flaky", db=db)).stdout.startswith("attempt-") and r,
            timeout=30,
            what="output while running",
        )
        assert res.returncode == 0 and "still running" in res.stderr, res.stderr
        release.touch()
        wait_until(
            lambda: any(r["state"] == "failed" for r in runs_json("flaky", db)), timeout=90, what="the run to fail"
        )
    finally:
        release.touch()
        d.stop()
    run = next(r for r in runs_json("flaky", db) if r["state"] == "failed")
    assert run["attempts"] == 3
    for n in (1, 2, 3):
        res = chronoctl("logs", run["run_id"][:8], "--attempt", str(n), db=db)
        assert res.returncode == 0 and res.stdout.strip() == f"attempt-{n}", (n, res.stdout, res.stderr)
    assert chronoctl("logs", run["run_id"], "--attempt", "4", db=db).returncode == 2
    # the launcher removes a recorded run's files once no launch came for 2 s, and lives on
    # after the daemon until it has
    wait_until(
        lambda: not [p for p in os.listdir(db + ".state") if p.endswith(".output")],
        timeout=30,
        what="the live files to go with their attempts",
    )


def test_logs_of_a_job_is_its_running_run_and_follow_goes_across_runs_with_a_header_each(tmp_path):
    """The overrun case: while a run goes on, the next occurrences are skipped_overlap;
    `logs JOB` is the running run (a skipped one never started, though it is newer), and
    `logs -f JOB` follows one run after the other, like `journalctl -f`, until interrupted."""
    import signal

    reg, db = tmp_path / "jobs.d", str(tmp_path / "chrono.db")
    reg.mkdir()
    overrun = job("ops.overrun", "@every 1s", 'echo "start $CHRONO_RUN_ID"; sleep 12; echo "end $CHRONO_RUN_ID"')
    tick = job("ops.tick", "@every 2s", 'echo "start $CHRONO_RUN_ID"; sleep 0.5; echo "end $CHRONO_RUN_ID"')
    slow = job("ops.slow", "@every 1h", "echo going; sleep 30", timeout_s=1)
    write_jobs(reg / "a.yaml", jobs_file(overrun, tick, slow))
    d = Chronod(reg, db, tmp_path / "chronod.log").start()
    follower = None
    # waited for in the daemon's log, not by polling `chronoctl runs` (a process each time)
    logged = lambda pattern: re.search(pattern, d.log_since_start())  # noqa: E731
    try:
        chronoctl("trigger", "ops.slow", db=db, check=True)
        wait_until(
            lambda: logged(r"event=run\.settled job=ops\.overrun .*state=skipped_overlap"),
            timeout=30,
            what="a run that overruns the next occurrence",
        )
        res = chronoctl("logs", "ops.overrun", db=db)
        assert res.returncode == 0, res.stderr  # a skipped run never started: never the one shown
        shown = res.stderr.split("-- run ", 1)[1][:8]
        store = open_store(db)
        try:
            runs = store.runs("ops.overrun")
        finally:
            store.close()
        [picked] = [r for r in runs if r.run_id.startswith(shown)]
        assert [r for r in runs if r.state == "skipped_overlap" and r.scheduled_at > picked.scheduled_at]
        assert picked.started_at is not None and res.stdout.startswith(f"start {picked.run_id}")
        assert "attempt 1 of 1" in res.stderr and "running since" in res.stderr, res.stderr
        assert chronoctl("logs", "ops.overrun", "--attempt", "1", db=db).returncode == 0
        follower = subprocess.Popen(
            [str(BIN / "chronoctl"), "logs", "-f", "ops.tick", "--db", db],
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ended = []
        assert follower.stdout is not None
        for line in follower.stdout:
            if line.startswith("end "):
                ended.append(line.split()[1])
            if len(set(ended)) == 2:
                break
        follower.send_signal(signal.SIGINT)
        try:
            assert follower.wait(30) == 130
        except subprocess.TimeoutExpired:
            follower.send_signal(signal.SIGABRT)  # faulthandler prints where it hangs
            raise AssertionError(f"logs -f ignored Ctrl-C: {follower.communicate(timeout=10)[1]}") from None
        err = follower.stderr.read() if follower.stderr else ""
        assert err.count("-- run ") >= 2 and "waiting for the next run of ops.tick" in err, err
        timed = wait_until(
            lambda: logged(r"event=run\.finished job=ops\.slow run=(\w+) .*state=timed_out"),
            timeout=30,
            what="the timeout",
        )
        res = chronoctl("logs", "ops.slow", db=db)
        assert "killed by its timeout (1s)" in res.stderr and timed.group(1)[:8] in res.stderr, res.stderr
        header = json.loads(chronoctl("logs", "ops.slow", "--json", db=db).stdout)["header"]
        assert (header["state"], header["killed_by"], header["attempt"], header["attempts_max"]) == (
            "timed_out",
            "timeout",
            1,
            1,
        )
    finally:
        if follower is not None and follower.poll() is None:
            follower.kill()
        d.stop()
