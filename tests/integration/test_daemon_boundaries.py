"""The run/process and daemon/launcher boundaries, re-run as the issue wrote them, with
real daemons: `overlap: replace` and `timeout_s` leave no `setsid` descendant; a launcher
stopped with requests queued, its daemon killed -9 and replaced, then continued, starts
nothing the new daemon already settled."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from chronod.runner.runner import launchers
from tests.integration.daemon_helpers import (
    Chronod,
    job,
    jobs_file,
    runs_json,
    wait_until,
    write_jobs,
    write_once_soon,
)


def _env(tmp_path: Path) -> tuple[Path, str, Path]:
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    return reg, str(tmp_path / "chrono.db"), tmp_path / "chronod.log"


def _with_arg(arg: str) -> list[int]:
    """Live processes whose command line has `arg` (zombies are dead)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if arg.encode() in argv and stat[stat.rfind(")") + 2] not in "ZX":
            found.append(int(name))
    return found


def _launchers_of(pid: int) -> list[int]:
    """The daemon's launchers, once all of them are up (one per CPU, at most two)."""

    def up() -> list[int] | None:
        found = _children(pid, "launchloop")
        return found if len(found) == launchers() else None

    return wait_until(up, what="the launchers")


def _children(pid: int, marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            argv = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid and marker.encode() in argv:
            found.append(int(name))
    return found


def test_overlap_replace_and_timeout_leave_no_setsid_descendant(tmp_path):
    reg, db, log = _env(tmp_path)
    tag = f"{6000 + os.getpid() % 1000}.{uuid.uuid4().int % 10**6}"  # a sleep of ~6000 s no one else runs
    replaced, timed, own = f"3{tag}", f"1{tag}", f"4{tag}"
    write_jobs(
        reg / "a.yaml",
        jobs_file(
            job("rep", "@every 2s", f"(setsid sleep {replaced} &); sleep {own}", overlap="replace"),
            job("tmo", "@every 5s", f"setsid sleep {timed} & sleep 6005", timeout_s=2, kill_grace_s=1),
        ),
    )
    d = Chronod(reg, db, log).start()
    try:
        wait_until(
            lambda: sum(r["state"] == "cancelled" for r in runs_json("rep", db)) >= 3,
            timeout=40,
            what="three runs replaced",
        )
        wait_until(lambda: any(r["state"] == "timed_out" for r in runs_json("tmo", db)), timeout=30, what="the timeout")
        # the replacing run's own child may be alive; none of a cancelled run's
        wait_until(lambda: len(_with_arg(replaced)) <= 1, timeout=10, what="replaced runs' setsid children to go")
        wait_until(lambda: not _with_arg(timed), timeout=10, what="the timed-out run's setsid child to go")
    finally:
        d.stop()
    for pid in _with_arg(replaced) + _with_arg(timed) + _with_arg(own):
        os.kill(pid, signal.SIGKILL)  # the run still going when the daemon stopped (not a finding)


def _witness(path: Path) -> list[tuple[str, int, datetime]]:
    """(run id, attempt, when its job started) per line a job appended: `date` read the
    same clock the daemon stamps its rows with."""
    found = []
    for line in path.read_text().splitlines():
        rid, attempt, at = line.split()
        found.append((rid, int(attempt), datetime.fromtimestamp(float(at), timezone.utc)))
    return found


def test_a_stopped_launcher_replaced_by_a_new_daemon_runs_nothing_it_settled(tmp_path):
    """kill -STOP <launcher>; sleep 2.5; kill -9 <chronod>; start a new chronod; wait;
    kill -CONT <launcher>: nothing starts after the new daemon settled it. An unsafe run
    recorded lost never starts after the lost was recorded, and attempt 1 of a re-run
    idempotent run never starts after it was settled for attempt 2.

    That either ran before is allowed: a launcher stopped in the middle of a start has
    started the job already, and the new daemon kills it (fence.take_over), then the job,
    then records the run lost (its outcome is unknown). Each job writes the time it
    started, so the two are told apart by time, not by whether the run ran."""
    reg, db, log = _env(tmp_path)
    ran_u, ran_t = tmp_path / "ran-unsafe", tmp_path / "ran-tick"
    stamp = "$CHRONO_RUN_ID $CHRONO_ATTEMPT $(date +%s.%N)"
    write_jobs(
        reg / "a.yaml",
        jobs_file(
            job("unsafe", "@every 1s", f"echo {stamp} >> {ran_u}", idempotency_class="unsafe", overlap="allow"),
            job("tick", "@every 1s", f"echo {stamp} >> {ran_t}", overlap="allow"),
        ),
    )
    old = Chronod(reg, db, log).start()
    assert old.proc is not None
    wait_until(
        lambda: all(any(r["state"] == "succeeded" for r in runs_json(j, db)) for j in ("unsafe", "tick")),
        what="both jobs to run",
    )
    stopped = _launchers_of(old.proc.pid)
    for launcher in stopped:
        os.kill(launcher, signal.SIGSTOP)
    try:
        time.sleep(2.5)  # the daemon queues launches the stopped launcher does not read
        old.kill9()
        new = Chronod(reg, db, log).start()
        wait_until(
            lambda: [r for r in runs_json("unsafe", db) if r["state"] == "lost"],
            timeout=30,
            what="the queued unsafe runs to be settled lost",
        )
        wait_until(
            lambda: [r for r in runs_json("tick", db) if r["attempts"] > 1 and r["state"] == "succeeded"],
            timeout=30,
            what="a queued tick run to run again as attempt 2",
        )
        time.sleep(2)
    finally:
        for launcher in stopped:
            with contextlib.suppress(ProcessLookupError):  # the new daemon may have ended it already
                os.kill(launcher, signal.SIGCONT)
    wait_until(lambda: not any(map(_with_arg_pid, stopped)), timeout=30, what="the old launchers to drain and exit")
    time.sleep(1)  # a job the resumed launcher started (it must not) has written its line
    new.stop()
    lost = {r["run_id"]: _at(r["finished_at"]) for r in runs_json("unsafe", db) if r["state"] == "lost"}
    settled = {  # tick runs re-run: when attempt 1 was settled (recorded lost, attempt 2 due)
        r["run_id"]: _at(t["finished_at"])
        for r in runs_json("tick", db)
        for t in r["tries"]
        if t["attempt"] == 1 and r["attempts"] > 1
    }
    unsafe, tick = _witness(ran_u), _witness(ran_t)
    late = [(rid, at.isoformat(), lost[rid].isoformat()) for rid, _, at in unsafe if rid in lost and at > lost[rid]]
    assert not late, f"an unsafe run started after it was recorded lost (run, started, lost): {late}"
    ids = [rid for rid, _, _ in unsafe]
    assert len(ids) == len(set(ids)), "an unsafe run ran twice"
    first = [(rid, at) for rid, a, at in tick if a == 1 and rid in settled]
    late = [(rid, at.isoformat(), settled[rid].isoformat()) for rid, at in first if at > settled[rid]]
    assert not late, f"attempt 1 of a tick run started after it was settled (run, started, settled): {late}"
    tries = Counter((rid, a) for rid, a, _ in tick)
    assert all(n == 1 for n in tries.values()), f"an attempt of a tick run ran twice: {tries}"
    # the launcher read what was queued and refused it; or, stopped holding the start lock,
    # it was killed by the new daemon and its queue went with it (its runs settled as a
    # dead launcher's: those it had started did run, before)
    text = Path(log).read_text()
    queued, killed = "not started: " in text, "killed_launchers=" in text
    assert queued or killed, "nothing was queued and no launcher was stopped mid-start: the test proved nothing"
    # what the run left to tell (pytest -s): how many ran before they were settled
    print(
        f"lost={len(lost)} ran-before-lost={len({r for r, _, _ in unsafe} & set(lost))} re-run={len(settled)} "
        f"attempt-1-ran-before-settled={len(first)} launcher-killed-mid-start={killed}"
    )


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _with_arg_pid(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def test_a_killed_launchers_setsid_worker_is_dead_before_attempt_2_starts(tmp_path):
    """An idempotent job whose worker runs under `setsid ... & wait`; the launcher is
    killed -9: attempt 1's worker never finishes, and attempt 2 runs alone."""
    reg, db, log = _env(tmp_path)
    w = tmp_path / "witness"
    worker = f"echo start $CHRONO_ATTEMPT >> {w}; sleep 4; echo end $CHRONO_ATTEMPT >> {w}"
    d = Chronod(reg, db, log).start()
    assert d.proc is not None
    make = lambda schedule: jobs_file(job("work", schedule, f"setsid sh -c '{worker}' & wait"))  # noqa: E731
    write_once_soon(reg / "a.yaml", make, "work", [d], db)
    try:
        wait_until(lambda: w.exists() and "start 1" in w.read_text(), timeout=30, what="attempt 1's worker")
        for launcher in _launchers_of(d.proc.pid):
            os.kill(launcher, signal.SIGKILL)
        wait_until(lambda: "start 2" in w.read_text(), timeout=90, what="attempt 2")
        wait_until(lambda: "end 2" in w.read_text(), timeout=30, what="attempt 2 to end")
    finally:
        d.stop()
    lines = w.read_text().splitlines()
    assert "end 1" not in lines, f"attempt 1's worker outlived its launcher and ran beside attempt 2: {lines}"
    assert lines == ["start 1", "start 2", "end 2"]


def test_a_result_that_arrives_after_its_run_was_settled_lost_is_stored_not_dropped(tmp_path):
    """An unsafe run is settled `lost` (its launcher killed -9); a result for that very
    attempt then appears in the state directory (what a late outcome leaves): the next
    chronod stores it next to the `lost`, and did-it-run shows it."""
    reg, db, log = _env(tmp_path)
    d = Chronod(reg, db, log).start()
    assert d.proc is not None
    make = lambda schedule: jobs_file(job("once", schedule, "sleep 30", idempotency_class="unsafe"))  # noqa: E731
    write_once_soon(reg / "a.yaml", make, "once", [d], db)
    (run,) = wait_until(
        lambda: [r for r in runs_json("once", db) if r["state"] == "running"], timeout=30, what="the run"
    )
    for launcher in _launchers_of(d.proc.pid):
        os.kill(launcher, signal.SIGKILL)
    wait_until(
        lambda: [r for r in runs_json("once", db) if r["state"] == "lost"], timeout=30, what="the run to be lost"
    )
    d.stop()
    late = {
        "run_id": run["run_id"],
        "attempt": 1,
        "state": "succeeded",
        "exit_code": 0,
        "signal": None,
        "started_at": run["started_at"],
        "finished_at": run["started_at"],
        "output_tail": "",
        "output_bytes": 0,
        "error": None,
        "pid": None,
    }
    state_dir = Path(db + ".state")
    (state_dir / f"{run['run_id']}.1.result.json").write_text(json.dumps(late))
    d = Chronod(reg, db, log).start()
    assert "event=run.late_outcome" in d.log_since_start()
    d.stop()
    (after,) = [r for r in runs_json("once", db) if r["run_id"] == run["run_id"]]
    assert after["state"] == "lost"
    assert "late result, after this attempt was settled lost: succeeded (exit code 0)" in after["error"]
    # the launcher removes the file off the daemon's thread and may outlive the daemon by a moment
    stale = state_dir / f"{run['run_id']}.1.result.json"
    wait_until(lambda: not stale.exists(), timeout=30, what="the launcher to remove the noted result")
