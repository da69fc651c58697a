"""Drive the installed chronod and chronoctl as a user would: real processes, real jobs."""

from __future__ import annotations

import json
import os
import signal as _signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

BIN = Path(sys.executable).parent


def wait_until(cond, timeout: float = 15.0, interval: float = 0.05, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


STARTED: list["Chronod"] = []  # every daemon a test started; the conftest stops leftovers


class Chronod:
    """One chronod subprocess on a registry directory and a database."""

    def __init__(self, registry: Path, db: str, log: Path, *extra: str, env: dict | None = None):
        self.registry, self.db, self.log_path, self.extra = registry, db, log, extra
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self._offset = 0

    def start(self, wait_ready: bool = True) -> "Chronod":
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(BIN / "chronod"), "--registry", str(self.registry), "--db", self.db, *self.extra],
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        logf.close()
        STARTED.append(self)
        if wait_ready:
            wait_until(
                lambda: "event=daemon.ready" in self.log_since_start() or self.proc.poll() is not None,
                timeout=30,
                what="chronod to become ready",
            )
            assert self.proc.poll() is None, self.log_since_start()
        return self

    def log_since_start(self) -> str:
        data = self.log_path.read_bytes()[self._offset :]
        return data.decode(errors="replace")

    def send(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, sig: int = _signal.SIGTERM, timeout: float = 15) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)


def chronoctl(
    *args: str,
    db: str | None = None,
    check: bool = False,
    env: dict | None = None,
    timeout: float = 120,
    process: bool = False,
) -> subprocess.CompletedProcess:
    """Run the CLI: in this process (what it prints and its exit code), or with `process` as
    a real one, for what only a process shows. The timeout only ends a hung real one: a loaded
    CI host has taken over 30 s to start Python and read a fleet's runs."""
    argv = [*args, *(["--db", db] if db is not None else [])]
    if process:
        res = subprocess.run(
            [str(BIN / "chronoctl"), *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    else:
        from tests.inprocess import chronoctl as in_process

        res = in_process(*argv, env=env)
    if check and res.returncode != 0:
        raise AssertionError(f"chronoctl {' '.join(args)} exited {res.returncode}: {res.stderr}{res.stdout}")
    return res


def runs_json(job: str, db: str, since: str = "1h") -> list[dict]:
    """The job's runs; none while the job has not reached the database yet (a test waits for
    its runs after a write, and a reload it saw in the log may be an earlier one)."""
    res = chronoctl("runs", job, "--since", since, "--limit", "100000", "--json", db=db)
    if res.returncode == 2 and f"no job '{job}'" in res.stderr:
        return []
    if res.returncode != 0:
        raise AssertionError(f"chronoctl runs {job} exited {res.returncode}: {res.stderr}{res.stdout}")
    return json.loads(res.stdout)


def write_jobs(path: Path, jobs_yaml: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(jobs_yaml)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def job(id_: str, schedule: str, command: str, **fields) -> str:
    lines = [
        f"  - id: {id_}",
        "    owner: team",
        f"    schedule: {json.dumps(schedule)}",
        f"    command: {json.dumps(command)}",
    ]
    fields.setdefault("idempotency_class", "idempotent")
    fields.setdefault("tolerance_s", 0)
    fields.setdefault("tolerance_reason", "tests need exact times")
    for k, v in fields.items():
        lines.append(f"    {k}: {json.dumps(v)}")
    return "\n".join(lines) + "\n"


def jobs_file(*jobs: str) -> str:
    return "jobs:\n" + "".join(jobs)


def registered_since(store, when, job_id: str | None = None) -> None:
    """Pretend the job `job_id` (default: every job) in `store` was registered at `when`
    (aware UTC): for histories written straight into the store, whose occurrences must fall
    inside a registration to be expected. Writes the store's own table through its schema."""
    from chronod.store import schema

    update = schema.job_known.update().values(known_from=when)
    if job_id is not None:
        update = update.where(schema.job_known.c.job_id == job_id)
    with store.engine.begin() as conn:
        conn.execute(update)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the kernel's choice, not a guess)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def once_a_day_at(t: datetime) -> str:
    """A 6-field schedule that fires once a day at `t`'s second (UTC)."""
    return f"{t.second} {t.minute} {t.hour} * * *"


def write_once_soon(
    path: Path, make_file, job_id: str, daemons: list["Chronod"], db: str, delay_s: float = 3
) -> datetime:
    """Write `make_file(schedule)` to `path` while `daemons` run, the schedule firing once
    `delay_s` from now, and return that time. A reload on a loaded host may end after the
    chosen second; the job would then wait for tomorrow: the file is written again further
    ahead until a daemon has stored today's occurrence (the stored rows say which)."""
    for _ in range(5):
        at = (datetime.now(timezone.utc) + timedelta(seconds=delay_s)).replace(microsecond=0)
        seen = [d.log_since_start().count("event=registry.reloaded") for d in daemons]
        write_jobs(path, make_file(once_a_day_at(at)))
        wait_until(
            lambda seen=seen: all(
                d.log_since_start().count("event=registry.reloaded") > n for d, n in zip(daemons, seen)
            ),
            timeout=30,
            what="the daemons to read the job file",
        )
        rows = wait_until(
            lambda: [r for r in runs_json(job_id, db, since="2d") if r["state"] != "cancelled"],
            timeout=30,
            what=f"an occurrence of {job_id} to be stored",
        )
        if any(datetime.fromisoformat(r["scheduled_at"]) <= at for r in rows):
            return at
        print(f"{job_id}: the file naming {at:%H:%M:%S} was read after that second; written again further ahead")
        delay_s *= 2
    raise AssertionError(f"{job_id}: no daemon read the job file before the second it names, five times over")


def stepped_daemon(store, runner, clock, load, waker, **options):
    """The real `Daemon` in-process on a fake clock, with the simulation's runner (`runner`,
    node `runner.node`), metrics and notifier, booted an hour ago; the test steps it."""
    from chronod.daemon.loop import Daemon
    from chronod.sim.world import Life, NullMetrics, SimNotifier

    return Daemon(
        clock=clock,
        store=store,
        runner=runner,
        load_registry=load,
        node=runner.node,
        metrics=NullMetrics(),
        notifier=SimNotifier(Life(runner.node, clock.monotonic()), None, clock),
        log=lambda *a, **k: None,
        waker=waker,
        boot_id="boot",
        boot_time=clock.now().timestamp() - 3600,
        **options,
    )
