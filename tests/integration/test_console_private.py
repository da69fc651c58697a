"""The web console without sign-in keeps the ledger private: it listens on loopback, which
every local user reaches, so it answers only connections of the user it runs as (and of
root). Another user is refused (403) and reads no job's output."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.daemon_helpers import BIN, chronoctl, free_port, wait_until
from tests.integration.local_users import account, python_as

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("users")]

USER = "chr-users-9"

FETCH = """
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"""


def fetch(url: str, user: str | None = None) -> tuple[int, str]:
    if user is None:
        res = subprocess.run([str(BIN / "python"), "-c", FETCH, url], capture_output=True, text=True, timeout=30)
    else:
        res = python_as(user, FETCH, url)
    status, _, body = res.stdout.partition("\n")
    assert status.strip().isdigit(), res
    return int(status), body


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_a_console_without_sign_in_answers_only_its_own_user(tmp_path, host):
    db = str(tmp_path / "chrono.db")
    assert chronoctl("db", "upgrade", db=db).returncode == 0
    port = free_port()
    shown = f"[{host}]" if ":" in host else host
    web = subprocess.Popen(
        [str(BIN / "chronoctl"), "web", "--listen", f"{shown}:{port}", "--db", db],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://{shown}:{port}/"
        wait_until(lambda: _up(url), timeout=30, what="the console to listen")
        assert fetch(url)[0] == 200
        with account(USER):
            status, body = fetch(url, USER)
        assert status == 403, body
        assert "answers only to root" in body
    finally:
        web.terminate()
        web.wait(10)


def _up(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=2).close()
        return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
