"""What a job file controls in its notifications is bounded: a notify command's output and
time (a real chronod, a command printing gigabytes, the daemon's memory read from /proc),
a webhook's whole exchange and answer (real socket servers), and the lanes that keep one
owner's slow endpoint from holding anyone else's notices."""

from __future__ import annotations

import itertools
import json
import os
import pwd
import re
import select
import socket
import subprocess
import threading
import time
from datetime import datetime, timezone

import pytest

from tests.integration.daemon_helpers import Chronod, wait_until, write_jobs

USER = "chr-bounds-2"


@pytest.fixture
def delegate():
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: a delegated file needs root (the test creates a user)")
    made = subprocess.run(["getent", "passwd", USER], capture_output=True).returncode != 0
    if made:
        subprocess.run(["useradd", "--system", "--no-create-home", USER], check=True)
    try:
        yield pwd.getpwnam(USER)
    finally:
        if made:
            subprocess.run(["userdel", USER], check=False)


def _vm(pid: int, field: str) -> int:
    """A /proc/<pid>/status memory field in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _notify_job(id_: str, routes: list[dict], user: str | None = None) -> str:
    lines = [
        f"  - id: {id_}",
        "    owner: team",
        *([f"    user: {user}"] if user else []),
        '    schedule: "@every 2s"',
        '    command: "true"',
        "    idempotency_class: idempotent",
        "    tolerance_s: 0",
        "    tolerance_reason: tests need exact times",
        "    notify:",
    ]
    for r in routes:
        lines.append(f"      - on: {json.dumps(r['on'])}")
        lines += [f"        {k}: {json.dumps(v)}" for k, v in r.items() if k != "on"]
    return "jobs:\n" + "\n".join(lines) + "\n"


@pytest.mark.root
@pytest.mark.xdist_group("users")
@pytest.mark.slow
def test_a_notify_command_printing_gigabytes_leaves_the_daemons_memory_flat_and_one_that_never_ends_is_killed(
    tmp_path, delegate
):
    """The report's case in a delegated file: its notify command prints 3 GB (then one
    never ends); chronod's peak memory stays within a few MB of where it was."""
    reg = tmp_path / "jobs.d"
    reg.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    theirs = reg / "theirs.yaml"
    write_jobs(
        theirs,
        _notify_job(
            "loud",
            [
                {"on": ["succeeded"], "command": "head -c 3000000000 /dev/zero", "timeout_s": 60},
                {"on": ["succeeded"], "command": "cat /dev/zero; cat /dev/zero >&2", "timeout_s": 3},
            ],
            USER,
        ),
    )
    os.chown(theirs, delegate.pw_uid, delegate.pw_gid)
    d = Chronod(reg, str(tmp_path / "chrono.db"), tmp_path / "chronod.log").start()
    try:
        pid = d.proc.pid
        base = _vm(pid, "VmRSS")
        wait_until(
            lambda: re.search(r"event=notify\.sent .*channel=command", d.log_since_start()),
            timeout=120,
            what="the 3 GB notify command delivered",
        )
        failed = wait_until(
            lambda: re.search(r"event=notify\.failed .*did not finish within 3s \(killed\).*", d.log_since_start()),
            timeout=60,
            what="the endless notify command killed at its deadline",
        )
        assert "channel=command" in failed.group(0)
        # stdout drained and discarded: gigabytes through the pipe, the daemon's peak a few MB more
        peak = _vm(pid, "VmHWM")
        assert peak - base < 100 * 1024, f"chronod grew from {base} KiB to a peak of {peak} KiB"
        assert d.proc.poll() is None
    finally:
        d.stop()
    # nothing of the delegated commands outlives the daemon (one may have been running at the stop)
    wait_until(
        lambda: subprocess.run(["pgrep", "-u", USER], capture_output=True).returncode == 1,
        timeout=10,
        what=f"no process of {USER} left",
    )


class DripServer:
    """An HTTP endpoint on loopback that answers one byte every 2 s, forever."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(100)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/slow"
        self.connections = 0
        self.open = self.most = 0  # connections open now, and at most at once
        self._lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn):
        with self._lock:
            self.open += 1
            self.most = max(self.most, self.open)
        try:
            self._drip_on(conn)
        finally:
            with self._lock:
                self.open -= 1

    def _wait_open(self, conn, seconds: float) -> bool:
        """Wait `seconds`, reading what the client still sends; False once it hung up."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and not self.closed.is_set():
            ready, _, _ = select.select([conn], [], [], min(left, 0.2))
            if ready and not conn.recv(65536):
                return False
        return not self.closed.is_set()

    def _drip_on(self, conn):
        with conn:
            try:
                conn.recv(65536)
                for b in itertools.cycle(b"HTTP/1.1 200 OK\r\nX-Slow: "):
                    conn.sendall(bytes([b]))
                    if not self._wait_open(conn, 2.0):
                        return
            except OSError:
                return

    def close(self):
        self.closed.set()
        self.sock.close()


def test_a_webhook_answering_a_byte_every_two_seconds_fails_at_its_deadline_not_never():
    from chronod.notify.deliver import DeliveryError, post_webhook

    slow = DripServer()
    naps = []
    try:
        with pytest.raises(DeliveryError, match=r"failed after 3 tries: no complete answer within 2s"):
            post_webhook({"webhook": slow.url, "timeout_s": 2}, {"event": "failed"}, sleep=naps.append)
    finally:
        slow.close()
    # per socket read, the drip would have kept each try alive forever
    assert slow.connections == 3 and naps == [1.0, 4.0]


def test_a_socket_timeout_before_the_watchdog_fires_still_reads_as_the_deadline(monkeypatch):
    """On a loaded host the socket's own timeout (equal to the deadline) can fire before the
    watchdog thread runs; the error must still name the deadline, not a bare 'timed out'."""
    from chronod.notify import deliver

    class LateTimer:  # a watchdog that never gets to run
        def __init__(self, *_a, **_k):
            self.daemon = True

        def start(self):
            pass

        def cancel(self):
            pass

    monkeypatch.setattr(deliver.threading, "Timer", LateTimer)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)  # accepts (the kernel does), never answers
    try:
        with pytest.raises(deliver.DeliveryError, match=r"failed after 3 tries: no complete answer within 1s"):
            deliver.post_webhook(
                {"webhook": f"http://127.0.0.1:{srv.getsockname()[1]}/", "timeout_s": 1}, {}, sleep=lambda _s: None
            )
    finally:
        srv.close()


def test_a_webhook_answer_is_read_up_to_its_cap_and_no_further():
    from chronod.notify.deliver import WEBHOOK_RESPONSE_BYTES, post_webhook

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    sent = []

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
            n = 0
            try:
                while n < 200 * WEBHOOK_RESPONSE_BYTES:
                    n += conn.send(b"x" * 65536)
            except OSError:
                pass
            sent.append(n)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    post_webhook({"webhook": f"http://127.0.0.1:{srv.getsockname()[1]}/", "timeout_s": 10}, {"event": "failed"})
    t.join(10)
    srv.close()
    # the daemon hung up after its cap: the server could not push its gigabyte
    assert sent and sent[0] < 200 * WEBHOOK_RESPONSE_BYTES


def test_one_owners_slow_webhooks_hold_only_their_own_lane_and_roots_notice_goes_out_at_once(store_url, tmp_path):
    """Twenty notices of a delegated owner's jobs to a server that drips, queued before
    one of root's: root's is delivered while every slow one is still in its first try."""
    from chronod.core.clock import Clock
    from chronod.notify.service import LANE_WORKERS, NotifyService
    from chronod.store.api import open_store
    from chronod.store.outbox import Outbox

    store = open_store(store_url)
    slow = DripServer()
    got = []
    fast = socket.socket()
    fast.bind(("127.0.0.1", 0))
    fast.listen(5)

    def answer():
        conn, _ = fast.accept()
        with conn:
            got.append(conn.recv(65536))
            conn.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    fast_url = f"http://127.0.0.1:{fast.getsockname()[1]}/page"
    now = datetime.now(timezone.utc)

    def row(job, user, url, n):
        route = {"index": 0, "command": None, "webhook": url, "timeout_s": 5, "user": user, "group": None}
        body = {"event": "failed", "job_id": job, "owner": "t", "run_id": f"{job}-{n}", "state": "failed"}
        return dict(
            job_id=job,
            event="failed",
            state="failed",
            run_id=f"{job}-{n}",
            dedupe_key=f"{job}|{n}",
            route=route,
            payload=body,
        )

    outbox = Outbox(store)
    outbox.add([row(f"nb.tick{j}", "nobody", slow.url, n) for n in range(4) for j in range(5)], now)
    outbox.add([row("rootjob", None, fast_url, 0)], now)
    svc = NotifyService(store, Clock(), lambda *a, **k: None, "n1")
    try:
        svc._dispatch(svc.clock.now())
        wait_until(lambda: got, timeout=60, what="root's notice at its endpoint")
        rows = {r.job_id + r.run_id: r for r in outbox.notices()}
        wait_until(lambda: outbox.notices("rootjob")[0].sent_at is not None, what="root's notice recorded sent")
        slow_rows = [r for r in outbox.notices() if r.job_id != "rootjob"]
        assert all(r.sent_at is None and r.attempts == 0 for r in slow_rows)
        # the delegated owner holds exactly its lane's workers, the rest of its rows wait unclaimed
        assert slow.connections <= LANE_WORKERS
        assert sum(r.claimed_by == "n1" for r in slow_rows) == LANE_WORKERS
        assert rows
    finally:
        svc.stop(0)
        slow.close()
        fast.close()


def _hook_job(id_: str, command: str, url: str, on: list[str], user: str | None = None) -> str:
    lines = [
        f"  - id: {id_}",
        "    owner: team",
        '    schedule: "@every 1s"',
        f"    command: {json.dumps(command)}",
        "    idempotency_class: idempotent",
        "    tolerance_s: 0",
        "    tolerance_reason: tests need exact times",
        "    max_silence_s: 3600",
    ]
    if user:
        lines.append(f"    user: {user}")
    lines += [
        "    notify:",
        f"      - on: {json.dumps(on)}",
        f"        webhook: {json.dumps(url)}",
        "        timeout_s: 5",
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.root
@pytest.mark.xdist_group("users")
@pytest.mark.slow
@pytest.mark.parametrize("root_job_user", [None, USER])
def test_five_delegated_jobs_webhooking_a_dripping_server_leave_roots_failed_notice_on_time(
    tmp_path, delegate, root_job_user
):
    """The report's case, on a real chronod: five delegated every-second jobs notify each
    success to a server answering a byte every 2 s (timeout_s 5); root's job fails and
    its `failed` notice reaches root's endpoint while the slow ones are still queued,
    also when root's job runs as the delegated file's owner (its notices are root's: they
    are not queued behind that user's own)."""
    from chronod.notify.service import LANE_WORKERS
    from tests.integration.test_notify import Receiver

    slow, fast = DripServer(), Receiver()
    reg = tmp_path / "jobs.d"
    reg.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    theirs = reg / "theirs.yaml"
    write_jobs(
        theirs, "jobs:\n" + "".join(_hook_job(f"nb{i}", "true", slow.url, ["succeeded"], USER) for i in range(5))
    )
    os.chown(theirs, delegate.pw_uid, delegate.pw_gid)
    d = Chronod(reg, str(tmp_path / "chrono.db"), tmp_path / "chronod.log").start()
    try:
        # the flood first: dozens of the delegated notices wait before root's job exists
        wait_until(lambda: slow.connections >= 2, timeout=30, what="the delegated lane busy with the drip")
        wait_until(
            lambda: d.log_since_start().count("event=notify.notice job=nb") >= 30,
            timeout=30,
            what="thirty delegated notices queued",
        )
        write_jobs(reg / "root.yaml", "jobs:\n" + _hook_job("pager", "exit 3", fast.url, ["failed"], root_job_user))
        wait_until(lambda: fast.events("pager") == ["failed"], timeout=30, what="root's failed notice delivered")
        assert slow.most <= LANE_WORKERS  # the delegated account never had more than its lane
        assert d.proc.poll() is None
    finally:
        d.stop()
        slow.close()
        fast.close()
