"""Notifications from a real chronod to a webhook receiver on 127.0.0.1, and the notifier's
reconciler against a real database."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.integration.daemon_helpers import Chronod, runs_json, wait_until, write_jobs

BODY_KEYS = {"event", "job_id", "owner", "run_id", "state", "scheduled_at", "fire_at", "exit_code", "error",
             "output_tail", "node", "sent_at", "chrono_version"}


class Receiver:
    """A webhook endpoint on loopback that keeps every JSON body it answered 200 to."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.arrived: list[float] = []
        self.headers: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                outer.headers.append(dict(self.headers))
                outer.bodies.append(json.loads(data))
                outer.arrived.append(time.time())
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, job: str) -> list[str]:
        return [b["event"] for b in self.bodies if b["job_id"] == job]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def env(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    return {"reg": reg, "db": str(tmp_path / "chrono.db"), "log": tmp_path / "chronod.log", "tmp": tmp_path}


def job(id_: str, command: str, url: str, on=("failed", "recovered", "silence"), **fields) -> str:
    lines = [f"  - id: {id_}", "    owner: team-a", '    schedule: "@every 1s"', f"    command: {json.dumps(command)}",
             "    idempotency_class: idempotent", "    tolerance_s: 0", "    tolerance_reason: tests",
             "    notify:", f"      - on: {json.dumps(list(on))}", f"        webhook: {json.dumps(url)}",
             "        timeout_s: 2"]
    lines += [f"    {k}: {json.dumps(v)}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"


def jobs_file(*jobs: str) -> str:
    return "jobs:\n" + "".join(jobs)


def chronod(env) -> Chronod:
    return Chronod(env["reg"], env["db"], env["log"])


def settle(seconds: float) -> None:
    time.sleep(seconds)


@pytest.mark.slow
def test_a_failing_job_sends_one_failed_and_after_the_fix_one_recovered(env, hook):
    path = env["reg"] / "a.yaml"
    write_jobs(path, jobs_file(job("flaky", "echo broken >&2; echo out; exit 1", hook.url, max_silence_s=3600)))
    d = chronod(env).start()
    try:
        wait_until(lambda: hook.events("flaky"), timeout=15, what="a failed notice")
        settle(3)  # three more failing runs
        assert hook.events("flaky") == ["failed"]
        failed = hook.bodies[0]
        assert BODY_KEYS <= failed.keys()
        assert (failed["state"], failed["exit_code"], failed["owner"]) == ("failed", 1, "team-a")
        assert "out" in failed["output_tail"]
        assert hook.headers[0]["Content-Type"] == "application/json"
        write_jobs(path, jobs_file(job("flaky", "true", hook.url, max_silence_s=3600)))
        wait_until(lambda: "recovered" in hook.events("flaky"), timeout=15, what="a recovered notice")
        settle(3)
        assert hook.events("flaky") == ["failed", "recovered"]
    finally:
        d.stop()


@pytest.mark.slow
def test_a_job_that_stops_succeeding_goes_silent_on_time(env, hook):
    flag = env["tmp"] / "healthy"
    flag.touch()
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("heartbeat", f"test -e {flag}", hook.url, on=("silence",),
                                                    max_silence_s=3)))
    d = chronod(env).start()
    try:
        wait_until(lambda: any(r["state"] == "succeeded" for r in runs_json("heartbeat", env["db"])),
                   what="a first success")
        flag.unlink()
        wait_until(lambda: hook.events("heartbeat"), timeout=20, what="a silence notice")
        wins = [r for r in runs_json("heartbeat", env["db"]) if r["state"] == "succeeded"]
        last = max(datetime.fromisoformat(r["finished_at"]) for r in wins)
        deadline = last + timedelta(seconds=3)
        body = hook.bodies[0]
        assert (body["event"], body["state"]) == ("silence", "silent")
        assert datetime.fromisoformat(body["at"]) == deadline
        late = hook.arrived[0] - deadline.timestamp()
        assert 0 <= late < 2.5, f"silence notice arrived {late:.2f}s after the deadline"
        settle(2)
        assert hook.events("heartbeat") == ["silence"]
    finally:
        d.stop()


@pytest.mark.slow
def test_a_dead_webhook_delays_no_job_and_its_failures_are_counted(env):
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(100)  # accepts connections, never answers: each try waits out its timeout
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = f"http://127.0.0.1:{closed.getsockname()[1]}/"
    closed.close()
    hang = f"http://127.0.0.1:{blackhole.getsockname()[1]}/"
    write_jobs(env["reg"] / "a.yaml", jobs_file(
        job("noisy", "exit 3", hang, max_silence_s=3600),
        job("noisy2", "exit 3", refused, max_silence_s=3600),
        job("steady", "true", hang, on=("failed",), max_silence_s=3600)))
    d = chronod(env).start()
    try:
        wait_until(lambda: "event=notify.failed" in d.log_since_start(), timeout=30, what="a failed delivery")
        settle(4)
        runs = [r for r in runs_json("steady", env["db"]) if r["started_at"]]
        assert len(runs) >= 8
        lags = [(datetime.fromisoformat(r["started_at"]) - datetime.fromisoformat(r["fire_at"])).total_seconds()
                for r in runs]
        assert max(lags) < 1.0, f"fire lag up to {max(lags):.3f}s while webhooks hang"
        assert "job=noisy2" in d.log_since_start()
    finally:
        d.stop()
        blackhole.close()


@pytest.mark.slow
def test_a_restart_mid_stream_loses_no_notice_and_repeats_none(env, hook):
    path = env["reg"] / "a.yaml"
    write_jobs(path, jobs_file(job("flaky", "exit 1", hook.url, max_silence_s=3600)))
    d = chronod(env).start()
    wait_until(lambda: hook.events("flaky"), timeout=15, what="a failed notice")
    d.stop()
    write_jobs(path, jobs_file(job("flaky", "true", hook.url, max_silence_s=3600)))
    d = chronod(env).start()
    try:
        wait_until(lambda: "recovered" in hook.events("flaky"), timeout=15, what="a recovered notice")
    finally:
        d.stop()
    d = chronod(env).start()
    try:
        settle(4)
    finally:
        d.stop()
    assert hook.events("flaky") == ["failed", "recovered"]


@pytest.mark.slow
def test_a_notice_claimed_by_a_killed_daemon_is_sent_after_the_restart(env, hook):
    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(10)
    port = hanging.getsockname()[1]
    path = env["reg"] / "a.yaml"
    write_jobs(path, jobs_file(job("flaky", "exit 1", f"http://127.0.0.1:{port}/", max_silence_s=3600)))
    d = chronod(env).start()
    wait_until(lambda: "event=notify.notice" in d.log_since_start(), timeout=15, what="a notice")
    d.kill9()  # while its webhook call hangs: claimed, not sent
    hanging.close()
    write_jobs(path, jobs_file(job("flaky", "exit 1", hook.url, max_silence_s=3600)))
    from chronod.store.api import open_store
    from chronod.store.outbox import Outbox

    store = open_store(env["db"])
    try:
        rows = Outbox(store).notices("flaky")
        assert [(r.event, r.sent_at) for r in rows] == [("failed", None)]
        assert rows[0].route["webhook"].endswith(f":{port}/")
    finally:
        store.close()
    # The row keeps the route it was recorded with: put a live receiver on that port.
    live = ThreadingHTTPServer(("127.0.0.1", port), hook.server.RequestHandlerClass)
    threading.Thread(target=live.serve_forever, daemon=True).start()
    d = chronod(env).start()
    try:
        wait_until(lambda: hook.events("flaky"), timeout=15, what="the notice after the restart")
        settle(2)
        assert hook.events("flaky") == ["failed"]
    finally:
        d.stop()
        live.shutdown()
        live.server_close()
