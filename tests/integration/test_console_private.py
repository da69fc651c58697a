"""The web console without sign-in keeps the ledger private: it listens on loopback, which
every local user reaches, so it answers only connections of the user it runs as (and of
root). Another user is refused (403) and reads no job's output. For the same reason a
trusted proxy on a loopback address is believed only on connections of its own account."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.daemon_helpers import BIN, chronoctl, free_port, wait_until
from tests.integration.local_users import account, python_as

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("users")]

USER = "chr-users-9"

FETCH = """
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], headers=dict(h.split(": ", 1) for h in sys.argv[2:]))
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"""


def fetch(url: str, user: str | None = None, *headers: str) -> tuple[int, str]:
    if user is None:
        res = subprocess.run(
            [str(BIN / "python"), "-c", FETCH, url, *headers], capture_output=True, text=True, timeout=30
        )
    else:
        res = python_as(user, FETCH, url, *headers)
    status, _, body = res.stdout.partition("\n")
    assert status.strip().isdigit(), res
    return int(status), body


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_a_console_without_sign_in_answers_only_its_own_user(tmp_path, host):
    shown = f"[{host}]" if ":" in host else host
    web, url = console(tmp_path, shown)
    try:
        assert fetch(url)[0] == 200
        with account(USER):
            status, body = fetch(url, USER)
        assert status == 403, body
        assert "answers only to root" in body
    finally:
        web.terminate()
        web.wait(10)


def console(tmp_path, shown: str, *options: str) -> tuple[subprocess.Popen, str]:
    db = str(tmp_path / "chrono.db")
    assert chronoctl("db", "upgrade", db=db).returncode == 0
    port = free_port()
    web = subprocess.Popen(
        [str(BIN / "chronoctl"), "web", "--listen", f"{shown}:{port}", "--db", db, *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://{shown}:{port}/"
    wait_until(lambda: web.poll() is not None or _up(url), timeout=30, what="the console to listen")
    return web, url


def test_a_trusted_proxy_on_loopback_is_believed_only_on_its_own_accounts_connections(tmp_path):
    proxy = ["--trusted-proxy", "127.0.0.1", "--user-header", "X-Forwarded-User"]
    refused = subprocess.run(
        [str(BIN / "chronoctl"), "web", "--listen", f"127.0.0.1:{free_port()}", "--db", str(tmp_path / "x.db"), *proxy],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "would believe every local user" in refused.stderr, refused.stderr
    web, url = console(tmp_path, "127.0.0.1", *proxy, "--proxy-user", "root")  # root plays the proxy
    try:
        assert web.poll() is None, web.stderr.read() if web.stderr else ""
        status, body = fetch(url, None, "X-Forwarded-User: carol")
        assert status == 200 and "carol" in body
        with account(USER):
            status, body = fetch(url, USER, "X-Forwarded-User: carol")
        assert status == 401 and "carol" not in body
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
