"""A job whose definition passed validation but raises while the daemon computes with it is
set aside: logged once, shown by `status` and in the metrics, and every other job (those of
its own file included) keeps running. The failure is injected past validation: a
`sitecustomize` on the daemon's PYTHONPATH makes one schedule raise after its first answer.
"""

from __future__ import annotations

import json
import signal
import urllib.request

from tests.integration.daemon_helpers import (
    Chronod,
    chronoctl,
    free_port,
    job,
    jobs_file,
    runs_json,
    wait_until,
    write_jobs,
)

BOMB = """
import chronod.core.schedule as schedule

_real = schedule.compile_schedule


class _Bomb:
    def __init__(self, inner):
        self._inner, self._answers = inner, 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def next_after(self, after):
        self._answers += 1
        if self._answers > 1:
            raise OverflowError("date value out of range (injected)")
        return self._inner.next_after(after)


def compile_schedule(expr, *args, **kwargs):
    sched = _real(expr, *args, **kwargs)
    return _Bomb(sched) if expr == "@every 3s" else sched


schedule.compile_schedule = compile_schedule
"""


def test_a_job_that_raises_at_run_time_is_quarantined_and_the_others_keep_running(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(BOMB)
    db, log = str(tmp_path / "chrono.db"), tmp_path / "chronod.log"
    write_jobs(reg / "mixed.yaml", jobs_file(job("good", "@every 1s", "true"), job("bomb", "@every 3s", "true")))
    write_jobs(reg / "other.yaml", jobs_file(job("other", "@every 1s", "true")))
    port = free_port()
    d = Chronod(reg, db, log, "--metrics-addr", f"127.0.0.1:{port}", env={"PYTHONPATH": str(inject)}).start()
    wait_until(lambda: "event=job.quarantined" in d.log_since_start(), timeout=15, what="the quarantine")
    before = {j: len(runs_json(j, db)) for j in ("good", "other")}

    def grown() -> dict | None:
        now = {j: len(runs_json(j, db)) for j in before}
        return now if all(now[j] >= before[j] + 2 for j in now) else None

    after = wait_until(grown, timeout=30, what="the other jobs to run on")
    res = chronoctl("status", "--json", db=db)
    assert res.returncode == 1, res.stderr  # degraded: a job is quarantined
    status = json.loads(res.stdout)
    assert status["health"]["reasons"] == ["1 job quarantined"]
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert d.proc.poll() is None, d.log_since_start()
    text = d.log_since_start()
    assert text.count("event=job.quarantined") == 1, text
    assert "job=bomb" in text and "OverflowError" in text
    assert all(after[j] >= before[j] + 2 for j in after), (before, after)
    shown = [e for e in status["registry_errors"] if "bomb" in e["message"]]
    assert shown and shown[0]["file"].endswith("mixed.yaml") and "quarantined" in shown[0]["message"]
    assert "chrono_jobs_quarantined 1.0" in metrics

    # a changed definition is tried again
    write_jobs(reg / "mixed.yaml", jobs_file(job("good", "@every 1s", "true"), job("bomb", "@every 2s", "true")))
    d.send(signal.SIGHUP)
    wait_until(lambda: "event=job.released" in d.log_since_start(), timeout=10, what="the release")
    wait_until(lambda: any(r["state"] == "succeeded" for r in runs_json("bomb", db)), timeout=10, what="bomb to run")
    status = json.loads(chronoctl("status", "--json", db=db, check=True).stdout)
    assert not [e for e in status["registry_errors"] if "bomb" in e["message"]]
    assert d.stop() == 0


def test_an_every_beyond_the_calendar_is_refused_and_the_other_jobs_run(tmp_path):
    """The reported case as written: `@every 3000000d` used to crash-loop the daemon."""
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    db, log = str(tmp_path / "chrono.db"), tmp_path / "chronod.log"
    write_jobs(
        reg / "huge.yaml",
        jobs_file(job("huge", "@every 3000000d", "true"), job("huger", "@every 999999999999999999999999s", "true")),
    )
    write_jobs(reg / "good.yaml", jobs_file(job("good", "@every 1s", "true")))
    d = Chronod(reg, db, log).start()
    wait_until(lambda: len(runs_json("good", db)) >= 3, timeout=15, what="the good job to run")
    d.send(signal.SIGHUP)  # a reload reads the file again: still no crash
    wait_until(
        lambda: (
            "event=registry." in d.log_since_start().split("event=daemon.ready", 1)[-1] or d.proc.poll() is not None
        ),
        timeout=30,
        what="the reload",
    )
    assert d.proc.poll() is None, d.log_since_start()
    text = d.log_since_start()
    assert d.stop() == 0
    assert "event=registry.error" in text and "@every" in text and "OverflowError" not in text
