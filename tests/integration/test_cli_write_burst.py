"""chronoctl's writes wait for the database's lock instead of failing.

The repro: 150 `chronoctl pause` and `trigger` at once against a running daemon with 75
jobs firing every second. Before, about half ended `database is locked`, exit 3, and the
daemon's notifier logged `notify.step_failed ... database is locked`. Now every one
succeeds and the daemon logs no such failure. The test runs 40 writers beside 20 jobs
(40 already fail this way with the busy wait cut to 10 ms, checked). Each writer is its own
process with its own connection, forked at the same moment from one interpreter that
imported chronoctl once: 40 fresh interpreters cost half a minute of CPU importing
SQLAlchemy, and started over seconds instead of at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chronod.store.api import open_store
from tests.integration.daemon_helpers import Chronod, job, jobs_file

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("users")]

JOBS = 20

# One interpreter imports chronoctl (and runs a read, which closes its connections), then
# forks a process per command at once; each child runs the command as the console script
# would, its stderr in OUT/<n>.err; prints the codes.
BURST = r"""
import contextlib, io, json, os, sys
from chronoctl.main import main

out, commands = sys.argv[1], json.loads(sys.argv[2])
with contextlib.redirect_stdout(io.StringIO()):  # a read first: the children skip chronoctl's lazy imports
    assert main(["list", *commands[0][-2:]]) == 0
children = {}
for n, argv in enumerate(commands):
    pid = os.fork()
    if pid == 0:
        for fd, name in ((1, "out"), (2, "err")):
            os.dup2(os.open(f"{out}/{n}.{name}", os.O_WRONLY | os.O_CREAT, 0o600), fd)
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    children[pid] = n
codes = {}
while children:
    pid, status = os.wait()
    codes[children.pop(pid)] = os.waitstatus_to_exitcode(status)
print(json.dumps([codes[n] for n in range(len(commands))]))
"""


def test_40_concurrent_pauses_and_triggers_all_succeed_against_a_running_daemon(tmp_path: Path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    (reg / "many.yaml").write_text(jobs_file(*(job(f"j{i}", "@every 1s", "true") for i in range(JOBS))))
    db = str(tmp_path / "chrono.db")
    d = Chronod(reg, db, tmp_path / "chronod.log").start()
    commands = [
        [*argv, "--db", db]
        for i in range(JOBS)
        for argv in (["pause", f"j{i}", "--reason", "burst"], ["trigger", f"j{i}"])
    ]
    out = tmp_path / "burst"
    out.mkdir()
    res = subprocess.run(
        [sys.executable, "-c", BURST, str(out), json.dumps(commands)], capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stderr
    codes = json.loads(res.stdout)
    ends = [(argv, code, (out / f"{n}.err").read_text()) for n, (argv, code) in enumerate(zip(commands, codes))]
    failed = [(args, code, err) for args, code, err in ends if code != 0]
    assert not failed, failed[:5]
    assert len(ends) == 2 * JOBS
    assert d.stop() == 0
    log = d.log_since_start()
    assert "database is locked" not in log, [ln for ln in log.splitlines() if "locked" in ln][:3]
    store = open_store(db)
    try:
        assert len(store.paused_jobs()) == JOBS
    finally:
        store.close()
