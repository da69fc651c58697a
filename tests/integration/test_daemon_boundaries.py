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
from pathlib import Path

import pytest

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


@pytest.mark.xfail(
    strict=False,
    reason="open: once in nine loaded CI runs a queued unsafe run recorded lost was also in the witness; "
    "whether it ran before the lost was written or after is not yet known (issue 20, case 10)",
)
def test_a_stopped_launcher_replaced_by_a_new_daemon_runs_nothing_it_settled(tmp_path):
    """kill -STOP <launcher>; sleep 2.5; kill -9 <chronod>; start a new chronod; wait;
    kill -CONT <launcher>: an unsafe run recorded lost never runs afterwards, and no run
    of the idempotent job runs twice."""
    reg, db, log = _env(tmp_path)
    ran_u, ran_t = tmp_path / "ran-unsafe", tmp_path / "ran-tick"
    write_jobs(
        reg / "a.yaml",
        jobs_file(
            job("unsafe", "@every 1s", f"echo $CHRONO_RUN_ID >> {ran_u}", idempotency_class="unsafe", overlap="allow"),
            job("tick", "@every 1s", f"echo $CHRONO_RUN_ID $CHRONO_ATTEMPT >> {ran_t}", overlap="allow"),
        ),
    )
    old = Chronod(reg, db, log).start()
    assert old.proc is not None
    wait_until(
        lambda: all(any(r["state"] == "succeeded" for r in runs_json(j, db)) for j in ("unsafe", "tick")),
        what="both jobs to run",
    )
    (launcher,) = wait_until(lambda: _children(old.proc.pid, "launchloop"), what="the launcher")
    os.kill(launcher, signal.SIGSTOP)
    try:
        time.sleep(2.5)  # the daemon queues launches the stopped launcher does not read
        old.kill9()
        new = Chronod(reg, db, log).start()
        lost = wait_until(
            lambda: [r for r in runs_json("unsafe", db) if r["state"] == "lost"],
            timeout=30,
            what="the queued unsafe runs to be settled lost",
        )
        redone = wait_until(
            lambda: [r for r in runs_json("tick", db) if r["attempts"] > 1 and r["state"] == "succeeded"],
            timeout=30,
            what="a queued tick run to run again as attempt 2",
        )
        time.sleep(2)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the new daemon may have ended it already
            os.kill(launcher, signal.SIGCONT)
    wait_until(lambda: not _with_arg_pid(launcher), timeout=30, what="the old launcher to drain and exit")
    time.sleep(1)
    new.stop()
    ran_unsafe = ran_u.read_text().split()
    assert not {r["run_id"] for r in lost} & set(ran_unsafe), "an unsafe run recorded lost ran afterwards"
    assert len(ran_unsafe) == len(set(ran_unsafe)), "an unsafe run ran twice"
    starts = Counter(line.split()[0] for line in ran_t.read_text().splitlines())
    assert all(starts[r["run_id"]] == 1 for r in redone), "attempt 1 of a re-run tick ran as well"
    assert "not started: " in Path(log).read_text(), "nothing was queued: the test proved nothing"


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
        (launcher,) = _children(d.proc.pid, "launchloop")
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
    (launcher,) = _children(d.proc.pid, "launchloop")
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
    assert not (state_dir / f"{run['run_id']}.1.result.json").exists()
