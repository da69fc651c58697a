"""Every reason chronod cannot start is one `chronod: error:` line and the exit status
chronod(8) gives it, never a traceback: the shipped unit's RestartPreventExitStatus=78 then
stops systemd from restarting a misconfigured daemon in a loop. Through the real binary."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import BIN, Chronod

ROOT = Path(__file__).resolve().parents[2]
EX_UNAVAILABLE, EX_SOFTWARE, EX_CONFIG = 3, 70, 78


def chronod(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONO_", "NOTIFY_SOCKET"))}
    return subprocess.run(
        [str(BIN / "chronod"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def assert_one_line_error(res: subprocess.CompletedProcess, code: int, *words: str) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("chronod: error:")]
    assert len(lines) == 1, res.stderr
    assert res.returncode == code, (res.returncode, res.stderr)
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture
def reg(tmp_path) -> Path:
    d = tmp_path / "jobs.d"
    d.mkdir()
    return d


@pytest.mark.parametrize("addr", ["foo", "99999", "127.0.0.1:99999", "127.0.0.1:", "localhost:http"])
def test_a_malformed_metrics_address_is_a_configuration_error(reg, tmp_path, addr):
    res = chronod("--registry", str(reg), "--db", str(tmp_path / "c.db"), "--metrics-addr", addr)
    assert_one_line_error(res, EX_CONFIG, "--metrics-addr", "HOST:PORT")
    assert not (tmp_path / "c.db").exists(), "a configuration error is found before the database is touched"


def test_a_metrics_port_in_use_is_a_configuration_error(reg, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = chronod("--registry", str(reg), "--db", str(tmp_path / "c.db"), "--metrics-addr", f"127.0.0.1:{port}")
    assert_one_line_error(res, EX_CONFIG, f"127.0.0.1:{port}", "cannot listen", "in use")


def test_a_missing_registry_is_a_configuration_error(tmp_path):
    res = chronod("--registry", str(tmp_path / "nope"), "--db", str(tmp_path / "c.db"))
    assert_one_line_error(res, EX_CONFIG, str(tmp_path / "nope"), "does not exist", "mkdir -p")


def test_a_registry_that_cannot_be_read_is_a_configuration_error(tmp_path):
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)  # unreadable even for root: ELOOP
    res = chronod("--registry", str(loop), "--db", str(tmp_path / "c.db"))
    assert_one_line_error(res, EX_CONFIG, str(loop), "cannot be read")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 directory; the symlink case covers root")
def test_a_registry_directory_without_read_permission_is_a_configuration_error(reg, tmp_path):
    reg.chmod(0)
    try:
        res = chronod("--registry", str(reg), "--db", str(tmp_path / "c.db"))
    finally:
        reg.chmod(0o755)
    assert_one_line_error(res, EX_CONFIG, str(reg), "cannot be read", "Permission denied")


def test_an_unreachable_database_exits_3(reg):
    res = chronod("--registry", str(reg), "--db", "postgresql+psycopg://chrono@127.0.0.1:1/chrono")
    assert_one_line_error(res, EX_UNAVAILABLE, "127.0.0.1", "connection")


def test_a_database_path_that_cannot_be_opened_exits_3(reg, tmp_path):
    res = chronod("--registry", str(reg), "--db", str(tmp_path))  # a directory
    assert_one_line_error(res, EX_UNAVAILABLE, "unable to open")


def test_a_database_with_a_newer_schema_is_a_configuration_error(reg, tmp_path):
    db = tmp_path / "c.db"
    subprocess.run([str(BIN / "chronoctl"), "db", "upgrade", "--db", str(db)], check=True, capture_output=True)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    res = chronod("--registry", str(reg), "--db", str(db))
    line = assert_one_line_error(res, EX_CONFIG, "9999_from_the_future", "newer", "upgrade chrono")
    assert re.search(r"revision \S+, newer", line)


def test_a_second_daemon_on_one_sqlite_file_is_a_configuration_error(reg, tmp_path):
    db = str(tmp_path / "c.db")
    first = Chronod(reg, db, tmp_path / "first.log").start()
    try:
        res = chronod("--registry", str(reg), "--db", db)
        assert_one_line_error(res, EX_CONFIG, "another chronod", f"pid {first.proc.pid}", "SQLite")
    finally:
        assert first.stop() == 0


def test_a_state_directory_that_cannot_be_created_is_a_configuration_error(reg, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = chronod("--registry", str(reg), "--db", str(tmp_path / "c.db"), "--state-dir", str(blocker / "state"))
    assert_one_line_error(res, EX_CONFIG, "state directory", str(blocker / "state"))


def test_every_exit_status_chronod_uses_is_in_its_man_page():
    page = (ROOT / "man" / "chronod.8").read_text()
    status = page[page.index(".SH EXIT STATUS") :].split("\n.SH ")[0]
    documented = {int(n) for n in re.findall(r"^\.B (\d+)$", status, re.M)}
    from chronod.daemon import main

    used = {v for k, v in vars(main).items() if k.startswith("EXIT_")}
    assert used <= documented, f"undocumented exit statuses: {sorted(used - documented)}"
    for phrase in ("--metrics-addr", "cannot be read", "newer", "another chronod", "port"):
        assert phrase in status.replace("\\-", "-"), phrase
