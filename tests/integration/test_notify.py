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

from tests.integration.daemon_helpers import Chronod, chronoctl, runs_json, wait_until, write_jobs

BODY_KEYS = {
    "event",
    "job_id",
    "owner",
    "run_id",
    "state",
    "scheduled_at",
    "fire_at",
    "exit_code",
    "error",
    "output_tail",
    "node",
    "sent_at",
    "chrono_version",
}


class Receiver:
    """A webhook endpoint on loopback that keeps every JSON body it answered 200 to."""

    def __init__(self, answer_after_s: float = 0.0):
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
                time.sleep(answer_after_s)  # a slow endpoint: the body is here, the answer is not yet
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
    lines = [
        f"  - id: {id_}",
        "    owner: team-a",
        '    schedule: "@every 1s"',
        f"    command: {json.dumps(command)}",
        "    idempotency_class: idempotent",
        "    tolerance_s: 0",
        "    tolerance_reason: tests",
        "    notify:",
        f"      - on: {json.dumps(list(on))}",
        f"        webhook: {json.dumps(url)}",
        "        timeout_s: 2",
    ]
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
    write_jobs(
        env["reg"] / "a.yaml",
        jobs_file(job("heartbeat", f"test -e {flag}", hook.url, on=("silence",), max_silence_s=3)),
    )
    d = chronod(env).start()
    try:
        wait_until(
            lambda: any(r["state"] == "succeeded" for r in runs_json("heartbeat", env["db"])), what="a first success"
        )
        flag.unlink()
        wait_until(lambda: hook.events("heartbeat"), timeout=20, what="a silence notice")
        wins = [r for r in runs_json("heartbeat", env["db"]) if r["state"] == "succeeded"]
        last = max(datetime.fromisoformat(r["finished_at"]) for r in wins)
        deadline = last + timedelta(seconds=3)
        body = hook.bodies[0]
        assert (body["event"], body["state"]) == ("silence", "silent")
        assert datetime.fromisoformat(body["at"]) == deadline
        late = hook.arrived[0] - deadline.timestamp()
        # never before the deadline; soon after it (the daemon wakes for it, it does not wait
        # for some later round), with room for a loaded host
        assert 0 <= late < 10, f"silence notice arrived {late:.2f}s after the deadline"
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
    write_jobs(
        env["reg"] / "a.yaml",
        jobs_file(
            job("noisy", "exit 3", hang, max_silence_s=3600),
            job("noisy2", "exit 3", refused, max_silence_s=3600),
            job("steady", "true", hang, on=("failed",), max_silence_s=3600),
        ),
    )
    d = chronod(env).start()
    try:
        wait_until(lambda: "event=notify.failed" in d.log_since_start(), timeout=30, what="a failed delivery")
        runs = wait_until(
            lambda: (
                (rows := [r for r in runs_json("steady", env["db"]) if r["started_at"]]) and len(rows) >= 8 and rows
            ),
            timeout=30,
            what="eight runs of steady",
        )
        lags = sorted(
            (datetime.fromisoformat(r["started_at"]) - datetime.fromisoformat(r["fire_at"])).total_seconds()
            for r in runs
        )
        # a delivery that held the loop would hold every start behind a 2 s webhook timeout, and
        # more each second (two failing jobs a second): the typical start would be seconds late.
        # One late start is a loaded host's, not the webhooks'.
        assert lags[len(lags) // 2] < 1.0, f"fire lags while webhooks hang: {lags}"
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
def test_a_notice_in_flight_when_chronod_stops_is_not_sent_again_by_the_next(env):
    slow = Receiver(answer_after_s=1.0)
    try:
        path = env["reg"] / "a.yaml"
        write_jobs(path, jobs_file(job("flaky", "exit 1", slow.url, max_silence_s=3600)))
        d = chronod(env).start()
        wait_until(lambda: slow.events("flaky"), timeout=15, what="a failed notice")
        d.stop()  # the endpoint has the body and has not answered yet: a graceful stop waits for it
        d = chronod(env).start()
        try:
            settle(3)
        finally:
            d.stop()
        assert slow.events("flaky") == ["failed"]
    finally:
        slow.close()


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


# --- the notifier's reconciler and the outbox, in process, on a real database ------------------


def _service(store, node, sent):
    from chronod.core.clock import Clock
    from chronod.notify.service import NotifyService

    return NotifyService(store, Clock(), lambda *a, **k: None, node, send=lambda route, body: sent.append(body))


def _spec_store(store_url, tmp_path, yaml_text):
    from chronod.specfile import load_registry
    from chronod.store.api import open_store

    reg = tmp_path / "reg"
    reg.mkdir(exist_ok=True)
    write_jobs(reg / "a.yaml", yaml_text)
    store = open_store(store_url)
    store.sync_jobs("n1", load_registry([reg], now=datetime.now(timezone.utc), secure=False).jobs.values())
    return store


def _run(job_id, at, state="pending", *, took=timedelta(milliseconds=200), **fields):
    """A stored run of `job_id` scheduled (and fired) at `at`; one that ended took `took`,
    after one attempt, exit code 0 or 1 by its state. `fields` override any of these."""
    from chronod.core.occurrence import run_id
    from chronod.store.api import Run

    ended = (
        {} if state == "pending" else {"attempts": 1, "exit_code": int(state != "succeeded"), "finished_at": at + took}
    )
    base = dict(run_id=run_id(job_id, at), job_id=job_id, job_key=job_id, scheduled_at=at, fire_at=at, state=state)
    return Run(**{**base, **ended, **fields})


def _rows(store, job_id):
    from chronod.store.outbox import Outbox

    return Outbox(store).notices(job_id)


def test_two_nodes_deciding_the_same_history_record_and_send_each_notice_once(store_url, tmp_path):

    store = _spec_store(
        store_url,
        tmp_path,
        jobs_file(job("flaky", "exit 1", "http://127.0.0.1:9/", on=("failed",), max_silence_s=3600)),
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)
    at = now - timedelta(seconds=30)
    store.insert_runs(
        [_run("flaky", at - timedelta(seconds=i), "failed", took=timedelta(milliseconds=300)) for i in range(5)]
    )
    sent_a, sent_b = [], []
    a, b = _service(store, "a", sent_a), _service(store, "b", sent_b)
    try:
        for _ in range(3):
            a.step(now)
            b.step(now)
        wait_until(lambda: all(r.sent_at for r in _rows(store, "flaky")), what="delivery")
        assert [r.event for r in _rows(store, "flaky")] == ["failed"]
        assert len(sent_a) + len(sent_b) == 1
    finally:
        a.stop()
        b.stop()
        store.close()


def test_a_deleted_next_occurrence_is_noticed_and_chronod_repairs_it(env, hook, tmp_path):
    from chronod.store.api import open_store

    write_jobs(
        env["reg"] / "a.yaml",
        jobs_file(
            job("hourly", "true", hook.url, on=("silence",), max_silence_s=7200).replace('"@every 1s"', '"@every 1h"')
        ),
    )
    d = chronod(env).start()
    store = open_store(env["db"])
    # occurrences more than a minute ahead are stored just after READY, a slice per wake-up
    wait_until(lambda: [r for r in store.pending() if r.job_id == "hourly"], what="the next occurrence stored")
    d.stop()
    try:
        pending = [r for r in store.pending() if r.job_id == "hourly"]
        assert len(pending) == 1
        assert _rows(store, "hourly") == [], "chronod paged a job whose next occurrence is stored"

        before = pending[0].scheduled_at - timedelta(hours=1)
        store.insert_runs([_run("hourly", before, "succeeded", took=timedelta(seconds=1), exit_code=None)])
        assert store.delete_run(pending[0].run_id)
        sent = []
        svc = _service(store, "checker", sent)
        try:
            svc.step(datetime.now(timezone.utc))
            rows = _rows(store, "hourly")
            assert [(r.event, r.state) for r in rows] == [("silence", "no_next_occurrence")]
            wait_until(lambda: sent, what="the no-next notice")
            svc._next_reconcile = None
            svc.step(datetime.now(timezone.utc))
            assert len(_rows(store, "hourly")) == 1  # once per break, not once per check
        finally:
            svc.stop()
        d = chronod(env).start()  # chronod stores it again just after READY (and reconciles every 300 s)
        try:
            wait_until(
                lambda: [r for r in store.pending() if r.job_id == "hourly"], what="the next occurrence stored again"
            )
        finally:
            d.stop()
        assert [r.run_id for r in store.pending() if r.job_id == "hourly"] == [pending[0].run_id]
    finally:
        store.close()


def test_a_first_occurrence_stored_while_the_reconciler_reads_is_not_paged_as_missing(store_url, tmp_path):
    """chronod stores a new job's first occurrence just after READY, while its notifier's
    first round reconciles: the occurrence lands between the reconciler's reads. Whichever
    read comes first, the job must not be paged as having no next occurrence."""
    store = _spec_store(
        store_url, tmp_path, jobs_file(job("fresh", "true", "http://127.0.0.1:9/", on=("silence",), max_silence_s=7200))
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)
    sent = []
    svc = _service(store, "n1", sent)
    stored = []

    def then_store(read):
        def wrapped(*a, **k):
            out = read(*a, **k)
            if not stored:  # the loop commits the first occurrence right after this read
                store.insert_runs([_run("fresh", now + timedelta(minutes=30))])
                stored.append(read.__name__)
            return out

        return wrapped

    svc.outbox.latest_runs = then_store(svc.outbox.latest_runs)
    svc.outbox.waiting_keys = then_store(svc.outbox.waiting_keys)
    try:
        svc.step(now)
        assert stored, "the reconciler read neither the latest nor the waiting runs"
        assert [(r.event, r.state) for r in _rows(store, "fresh")] == []
    finally:
        svc.stop()
        store.close()


def test_an_occurrence_left_pending_past_its_grace_is_reported_unclaimed(store_url, tmp_path):
    from chronod.core.occurrence import run_id

    store = _spec_store(
        store_url, tmp_path, jobs_file(job("stuck", "true", "http://127.0.0.1:9/", on=("silence",), max_silence_s=7200))
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)
    late = now - timedelta(seconds=90)
    store.insert_runs(
        [
            _run("stuck", late - timedelta(seconds=1), "succeeded", took=timedelta(seconds=1), exit_code=None),
            _run("stuck", late),
        ]
    )
    sent = []
    svc = _service(store, "n1", sent)
    try:
        svc.step(now)
        unclaimed = [r for r in _rows(store, "stuck") if r.state == "unclaimed"]
        # every second after `late` has no row either: all of them are unclaimed, each once
        assert run_id("stuck", late) in {r.run_id for r in unclaimed}
        assert len({r.dedupe_key for r in unclaimed}) == len(unclaimed)
        assert all((now - timedelta(seconds=60)) >= datetime.fromisoformat(r.payload["at"]) for r in unclaimed)
    finally:
        svc.stop()
        store.close()


def test_a_round_busy_with_one_job_still_notices_another_job_going_silent(store_url, tmp_path, monkeypatch):
    from chronod.notify import service

    monkeypatch.setattr(service, "CURSOR_OVERLAP_S", 0)  # later rounds read only busy's new rows

    store = _spec_store(
        store_url,
        tmp_path,
        jobs_file(
            job("busy", "exit 1", "http://127.0.0.1:9/", on=("failed",), max_silence_s=3600),
            job("quiet", "true", "http://127.0.0.1:9/", on=("silence",), max_silence_s=60).replace(
                '"@every 1s"', '"@every 1h"'
            ),
        ),
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)

    def ran(job_id, at, state):
        # every row, pending ones too, with an attempt, an exit code and an end
        ends = {"attempts": 1, "exit_code": int(state != "succeeded"), "finished_at": at + timedelta(milliseconds=200)}
        store.insert_runs([_run(job_id, at, state, **ends)])

    ran("quiet", now - timedelta(seconds=50), "succeeded")
    for job_id in ("busy", "quiet"):
        ran(job_id, now + timedelta(hours=1), "pending")  # each has its next occurrence
    svc = _service(store, "n1", [])
    try:
        svc.step(now)
        assert [r.event for r in _rows(store, "quiet")] == []
        # rounds that only bring new runs of `busy`: the one after quiet's deadline still
        # decides for quiet
        for i in range(1, 4):
            time.sleep(0.01)
            ran("busy", now + timedelta(seconds=5 * i), "failed")
            svc.step(now + timedelta(seconds=5 * i + 1))
        assert [r.event for r in _rows(store, "quiet")] == ["silence"]
        assert [r.event for r in _rows(store, "busy")] == ["failed"]
    finally:
        svc.stop()
        store.close()


def test_rounds_read_whole_rows_only_of_runs_not_decided_on_and_a_late_commit_before_the_cursor_is_noticed(
    store_url, tmp_path
):
    from chronod.core.occurrence import run_id
    from chronod.notify import service

    store = _spec_store(
        store_url,
        tmp_path,
        jobs_file(job("flaky", "exit 1", "http://127.0.0.1:9/", on=("failed", "recovered"), max_silence_s=3600)),
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)

    def ended(at, state, updated_at):
        store.insert_runs(
            [
                _run(
                    "flaky",
                    at,
                    state,
                    attempts=1,
                    exit_code=int(state != "succeeded"),
                    finished_at=at + timedelta(milliseconds=200),
                    updated_at=updated_at,
                )
            ]
        )

    for i in range(5):
        ended(now - timedelta(seconds=20 - i), "succeeded", now - timedelta(seconds=19 - i))
    ended(now + timedelta(hours=1), "pending", now)  # its next occurrence
    svc = _service(store, "n1", [])
    read: list[list[str]] = []
    whole = svc.outbox.terminal_runs
    svc.outbox.terminal_runs = lambda ids: (read.append(sorted(ids)), whole(ids))[1]
    asked: list[list[str]] = []
    get_states = svc.outbox.get_states
    svc.outbox.get_states = lambda names: (asked.append(sorted(names := list(names))), get_states(names))[1]
    try:
        svc.step(now)
        assert len(read[-1]) == 5
        assert asked[-1] == ["job:flaky"]
        svc.step(now + timedelta(seconds=1))  # nothing new: the overlap is not read again
        assert len(read) == 1
        # the cursor is now the newest change seen (now - 15 s). A failure whose transaction
        # began (updated_at) a second before it, committed only now: read at once, noticed
        ended(now - timedelta(seconds=10), "failed", now - timedelta(seconds=16))
        svc.step(now + timedelta(seconds=2))
        assert read[-1] == [run_id("flaky", now - timedelta(seconds=10))]
        assert [r.event for r in _rows(store, "flaky")] == ["failed"]
        assert asked[-1] == []  # its own last round's states, not read back
        # a commit far later than its change time: read with the whole overlap, once
        ended(now - timedelta(seconds=5), "succeeded", now - timedelta(seconds=25))
        svc.step(now + timedelta(seconds=3))
        assert len(read) == 2
        svc.step(now + timedelta(seconds=3 + service.WHOLE_OVERLAP_EVERY_S))
        assert read[-1] == [run_id("flaky", now - timedelta(seconds=5))]
        assert [r.event for r in _rows(store, "flaky")] == ["failed", "recovered"]
        svc.step(now + timedelta(seconds=4 + service.WHOLE_OVERLAP_EVERY_S))
        assert len(read) == 3
    finally:
        svc.stop()
        store.close()


def test_a_failure_after_the_wall_clock_stepped_back_is_told_and_the_success_after_it_recovers(store_url, tmp_path):
    """The cursor and each job's seen mark follow the wall clock: after a step back of five
    minutes, the runs that end next carry times before both. They are read, and the
    failure is told, though it shows a time before the success decided on before the step."""
    from chronod.core.clock import FakeClock
    from chronod.notify.service import NotifyService

    store = _spec_store(
        store_url,
        tmp_path,
        jobs_file(job("flaky", "exit 1", "http://127.0.0.1:9/", on=("failed", "recovered"), max_silence_s=3600)),
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)
    clock = FakeClock(now)

    def ended(at, state):
        store.insert_runs([_run("flaky", at - timedelta(seconds=1), state, took=timedelta(seconds=1), updated_at=at)])

    svc = NotifyService(store, clock, lambda *a, **k: None, "n1", send=lambda route, body: None)
    try:
        ended(now - timedelta(seconds=20), "succeeded")
        svc.step(clock.now())
        clock.advance(5)
        svc.step(clock.now())
        clock.jump_wall(-300)  # NTP, or an operator's `date -s`
        clock.advance(60)
        ended(clock.now() - timedelta(seconds=5), "failed")  # 4 min 40 s before the success by the wall
        svc.step(clock.now())
        assert [r.event for r in _rows(store, "flaky")] == ["failed"]
        clock.advance(30)
        ended(clock.now() - timedelta(seconds=2), "failed")  # still failing: nothing new to tell
        svc.step(clock.now())
        clock.advance(30)
        ended(clock.now() - timedelta(seconds=2), "succeeded")
        svc.step(clock.now())
        assert [r.event for r in _rows(store, "flaky")] == ["failed", "recovered"]
        # what was decided before the step is not decided again as the clock passes it
        clock.advance(400)
        svc.step(clock.now())
        assert [r.event for r in _rows(store, "flaky")] == ["failed", "recovered"]
    finally:
        svc.stop()
        store.close()


def test_in_a_fleet_only_the_first_live_node_decides_and_the_next_takes_over_when_it_leaves(store_url, tmp_path):
    if "postgresql" not in store_url:
        pytest.skip("a fleet shares PostgreSQL")

    store = _spec_store(
        store_url,
        tmp_path,
        jobs_file(job("flaky", "exit 1", "http://127.0.0.1:9/", on=("failed",), max_silence_s=3600)),
    )
    tokens = {n: store.acquire_node(n, pid=os.getpid(), hostname="h", boot_id="b", ttl_s=60) for n in ("a", "b")}
    now = datetime.now(timezone.utc).replace(microsecond=0)
    store.insert_runs([_run("flaky", now, "failed", took=timedelta(milliseconds=300))])
    a, b = _service(store, "a", []), _service(store, "b", [])
    try:
        b.step(now)
        assert _rows(store, "flaky") == []  # b is not the first live node
        store.release_node("a", tokens["a"])
        b.step(now)
        assert [r.event for r in _rows(store, "flaky")] == ["failed"]
    finally:
        a.stop()
        b.stop()
        store.close()


def test_a_job_held_by_its_tags_pause_is_not_called_silent_until_the_tag_is_resumed(env, hook):
    d = chronod(env).start()
    try:
        # the tag is paused before the job is registered: were the pause to land after the
        # job's 3 s of allowed silence (a slow `chronoctl` on a loaded host), the silence
        # notice would be right
        chronoctl("pause", "--tag", "db", "--reason", "INC-4 replica lag", db=env["db"], check=True)
        write_jobs(
            env["reg"] / "a.yaml",
            jobs_file(job("tagged", "exit 1", hook.url, on=("silence",), max_silence_s=3, tags=["db"])),
        )
        wait_until(
            lambda: sum(r["state"] == "skipped_paused" for r in runs_json("tagged", env["db"])) >= 5,
            timeout=15,
            what="five occurrences skipped while the tag is paused (past max_silence_s)",
        )
        assert hook.events("tagged") == []
        chronoctl("resume", "--tag", "db", db=env["db"], check=True)
        wait_until(lambda: hook.events("tagged"), timeout=20, what="the silence notice once the tag is resumed")
    finally:
        d.stop()


def test_a_job_that_never_succeeded_goes_silent_counted_from_its_registration_not_its_first_run(store_url, tmp_path):

    # registered now; its first run (a failure) only 100 s later; max_silence_s 60
    store = _spec_store(
        store_url,
        tmp_path,
        jobs_file(job("late", "exit 1", "http://127.0.0.1:9/", on=("silence",), max_silence_s=60)),
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)
    at = now + timedelta(seconds=100)
    store.insert_runs([_run("late", at, "failed")])
    svc = _service(store, "n1", [])
    try:
        svc.step(now + timedelta(seconds=130))  # 130 s after registration, 30 s after the first run
        assert "silent" in [r.state for r in _rows(store, "late")]
    finally:
        svc.stop()
        store.close()


def test_a_silence_deadline_wakes_a_round_for_its_own_job_only(store_url, tmp_path, monkeypatch):
    """With many jobs, a round woken by one job's silence deadline decides for that job, not
    for all of them (deciding for every job at each deadline kept the notifier busy)."""
    from chronod.notify import core, service

    quiet = [
        job(f"q{i}", "true", "http://127.0.0.1:9/", on=("silence",), max_silence_s=60 + i).replace(
            '"@every 1s"', '"@every 1h"'
        )
        for i in range(20)
    ]
    store = _spec_store(store_url, tmp_path, jobs_file(*quiet))
    now = datetime.now(timezone.utc).replace(microsecond=0)
    for i in range(20):
        at, nxt = now - timedelta(seconds=50), now + timedelta(hours=1)  # a success, and the next occurrence
        store.insert_runs([_run(f"q{i}", at, "succeeded"), _run(f"q{i}", nxt)])
    decided: list[str] = []
    real = core.decide
    monkeypatch.setattr(service.core, "decide", lambda spec, *a, **k: decided.append(spec.id) or real(spec, *a, **k))
    svc = _service(store, "n1", [])
    try:
        first = svc.step(now)
        assert sorted(decided) == sorted(f"q{i}" for i in range(20)) and first == now + timedelta(
            seconds=10, milliseconds=200
        )
        decided.clear()
        # q0's deadline (its success 49.8 s ago + 60 s) passes: only q0 is decided again, and it goes silent
        assert svc.step(now + timedelta(seconds=10, milliseconds=500)) == now + timedelta(seconds=11, milliseconds=200)
        assert decided == ["q0"]
        assert [r.event for r in _rows(store, "q0")] == ["silence"], _rows(store, "q0")
        assert _rows(store, "q1") == []
        decided.clear()
        svc.step(now + timedelta(seconds=12, milliseconds=500))  # q1's and q2's
        assert sorted(decided) == ["q1", "q2"] and [r.event for r in _rows(store, "q2")] == ["silence"]
    finally:
        svc.stop()
        store.close()


def test_a_job_held_by_a_maintenance_window_is_not_called_silent_and_its_clock_restarts_at_the_end(store_url, tmp_path):
    """The dead man's switch fired ("silent") during a window the job was held by: a window
    holds a job as a pause does."""
    from chronod.core.blackout import Window
    from chronod.notify.service import NotifyService

    store = _spec_store(
        store_url,
        tmp_path,
        jobs_file(
            job("nightly", "true", "http://127.0.0.1:9/", on=("silence",), max_silence_s=60).replace(
                '"@every 1s"', '"@every 1h"'
            )
        ),
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)
    window = Window(
        "mw", "CHG-9 storage swap", start=now - timedelta(minutes=5), end=now + timedelta(minutes=10), jobs=("nightly",)
    )
    store.insert_runs([_run("nightly", now - timedelta(seconds=100), "succeeded")])  # its switch: now - 40 s
    svc = NotifyService(
        store,
        __import__("chronod.core.clock", fromlist=["Clock"]).Clock(),
        lambda *a, **k: None,
        "n1",
        send=lambda route, body: None,
        known_windows=lambda: [window],
    )
    try:
        svc.step(now)
        svc.step(now + timedelta(minutes=5))
        assert _said(store, "nightly") == [], "silent while a maintenance window held the job"
        over = now + timedelta(minutes=10, seconds=1)
        svc.step(over)  # the window is over: the clock counts from here
        assert _said(store, "nightly") == []
        svc.step(over + timedelta(seconds=62))
        assert _said(store, "nightly") == [("silence", "silent")]
    finally:
        svc.stop()
        store.close()


def test_a_window_that_held_the_job_while_chronod_was_down_restarts_its_silence_clock(store_url, tmp_path):
    """A window opened and closed while no chronod ran: it held the job all the same, and
    the silence clock counts afresh from the restart (seed 109 of two days of 300 jobs: the
    notifier of the new process never saw the window, and called a job silent 20 minutes
    after the window ended)."""
    from chronod.core.blackout import Window
    from chronod.core.clock import Clock
    from chronod.notify.service import NotifyService

    store = _spec_store(
        store_url,
        tmp_path,
        jobs_file(
            job("hourly", "true", "http://127.0.0.1:9/", on=("silence",), max_silence_s=600).replace(
                '"@every 1s"', '"@every 1h"'
            )
        ),
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)
    window = Window(
        "mw",
        "CHG-9 storage swap",
        start=now + timedelta(seconds=60),
        end=now + timedelta(seconds=300),
        jobs=("hourly",),
    )
    store.insert_runs([_run("hourly", now - timedelta(seconds=100), "succeeded")])  # its switch: now + 500 s

    def notifier():
        return NotifyService(
            store, Clock(), lambda *a, **k: None, "n1", send=lambda route, body: None, known_windows=lambda: [window]
        )

    before = notifier()
    try:
        before.step(now)
    finally:
        before.stop()
    after = notifier()  # chronod was down from now to now + 400 s, over the whole window
    try:
        back = now + timedelta(seconds=400)
        after.step(back)
        # counted afresh from the restart: not silent before back + 600 s (without the
        # window: its last success + 600 s + the 400 s down, now + 900 s)
        after.step(now + timedelta(seconds=950))
        assert _said(store, "hourly") == [], "silent 10 minutes after a window that held it"
        after.step(back + timedelta(seconds=601))
        assert _said(store, "hourly") == [("silence", "silent")]
    finally:
        after.stop()
        store.close()


def _said(store, job_id):
    """The dead man's switch's notices of a job (not the reconciler's about its next occurrence)."""
    return [(r.event, r.state) for r in _rows(store, job_id) if r.state in ("silent", "succeeded")]


def test_a_five_second_restart_sends_neither_silence_nor_recovered(store_url, tmp_path):
    """A restart's few seconds without chronod are not the job's silence: the notifier of the
    new process does not count the time no notifier was deciding."""
    store = _spec_store(
        store_url,
        tmp_path,
        jobs_file(job("beat", "true", "http://127.0.0.1:9/", on=("silence", "recovered"), max_silence_s=3)),
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)
    store.insert_runs([_run("beat", now - timedelta(seconds=1), "succeeded")])  # ended now - 0.8 s
    before = _service(store, "n1", [])
    try:
        before.step(now)
    finally:
        before.stop()
    after = _service(store, "n1", [])  # the restarted daemon's notifier, 5 s later
    try:
        back = now + timedelta(seconds=5)
        after.step(back)
        store.insert_runs([_run("beat", back, "succeeded", took=timedelta(milliseconds=500))])  # the catch-up
        after.step(back + timedelta(seconds=1))
        assert _said(store, "beat") == []
        # a job that stays quiet after the restart still goes silent, counted without the 5 s
        after.step(back + timedelta(seconds=5))
        assert _said(store, "beat") == [("silence", "silent")]
    finally:
        after.stop()
        store.close()


def test_a_real_chronod_sends_no_silence_for_a_window_nor_for_a_five_second_restart(env, hook):
    """The issue as an operator met it, on a real daemon: a window holds the job past its
    max_silence_s, then chronod restarts with 5 s down; neither is a silence, and so
    nothing recovers either."""
    path = env["reg"] / "a.yaml"
    beat = job("beat", "true", hook.url, on=("silence", "recovered"), max_silence_s=6)
    write_jobs(path, jobs_file(beat))
    store_path = env["db"]
    d = chronod(env).start()
    try:
        wait_until(lambda: _successes(store_path, "beat"), timeout=30, what="a first success")
        opens = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=2)
        closes = opens + timedelta(seconds=15)
        window = (
            "blackouts:\n  - name: swap\n    reason: CHG-3\n    timezone: UTC\n"
            f"    from: {opens:%Y-%m-%d %H:%M:%S}\n    to: {closes:%Y-%m-%d %H:%M:%S}\n    jobs: [beat]\n"
        )
        write_jobs(path, window + jobs_file(beat))
        wait_until(
            lambda: any(at > closes for at in _successes(store_path, "beat")),
            timeout=40,
            what="a success after the window",
        )
        inside = [at for at in _successes(store_path, "beat") if opens + timedelta(seconds=1) < at < closes]
        assert not inside, f"the window did not hold the job: {inside}"
        settle(3)
    finally:
        d.stop()
    time.sleep(5)
    back = datetime.now(timezone.utc)
    d = chronod(env).start()
    try:
        wait_until(
            lambda: any(at > back for at in _successes(store_path, "beat")), timeout=30, what="a success after restart"
        )
        settle(4)
    finally:
        d.stop()
    assert hook.events("beat") == []


def _successes(db, job_id):
    from chronod.store.api import open_store

    store = open_store(db)
    try:
        return [r.finished_at for r in store.runs(job_id, states=["succeeded"], limit=50) if r.finished_at]
    finally:
        store.close()


def test_a_round_that_reads_every_job_builds_its_heap_with_collections_held(store_url, tmp_path):
    """The daemon holds garbage collections through the notifier's rounds over every job
    (chronod.daemon.kernel.collections_held): the first one, and one after the jobs changed;
    a round over the same jobs holds nothing."""
    from contextlib import contextmanager

    from chronod.core.clock import Clock
    from chronod.notify.service import NotifyService

    store = _spec_store(store_url, tmp_path, jobs_file(job("a", "true", "http://127.0.0.1:9/", on=("failed",))))
    rounds: list[str] = []

    @contextmanager
    def building():
        rounds.append("held")
        yield

    svc = NotifyService(store, Clock(), lambda *a, **k: None, "n1", send=lambda r, b: None, building=building)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    try:
        svc.step(now)
        svc.step(now + timedelta(seconds=1))
        assert rounds == ["held"]
        store.sync_jobs("n1", [])  # the jobs changed: every job is read again
        svc.step(now + timedelta(seconds=2))
        assert rounds == ["held", "held"]
    finally:
        svc.stop()
        store.close()


def test_shed_runs_store_no_state_and_a_restart_after_them_tells_nothing_twice(store_url, tmp_path):
    """Past a fleet's ceiling most ended runs are shed: they tell the owner nothing, and the
    notifier stores no state for them (its seen mark moves in memory only). A restarted
    notifier that decides them again from the stored state sends nothing twice, and the
    next change is still told once."""

    def _told(store, job_id):
        return [(r.event, r.state) for r in _rows(store, job_id)]

    store = _spec_store(
        store_url,
        tmp_path,
        jobs_file(job("flaky", "exit 1", "http://127.0.0.1:9/", on=("failed", "recovered"), max_silence_s=3600)),
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)
    store.insert_runs([_run("flaky", now + timedelta(hours=1))])  # its next occurrence
    store.insert_runs([_run("flaky", now - timedelta(seconds=20), "failed")])
    stored: list[list[str]] = []

    def service():
        svc = _service(store, "n1", [])
        set_states = svc.outbox.set_states
        svc.outbox.set_states = lambda states, at: (
            stored.append(sorted(k for k in states if k.startswith("job:"))),
            set_states(states, at),
        )[1]
        return svc

    svc = service()
    try:
        svc.step(now)
        assert _told(store, "flaky") == [("failed", "failed")]
        assert stored[-1] == ["job:flaky"]
        # shed runs and a failure of a job already failing: nothing to tell, nothing stored
        shed = dict(attempts=0, exit_code=None, error="node n1 overloaded: started 1.2 s late")
        store.insert_runs([_run("flaky", now - timedelta(seconds=19 - i), "skipped_outage", **shed) for i in range(3)])
        store.insert_runs([_run("flaky", now - timedelta(seconds=15), "failed")])
        svc.step(now + timedelta(seconds=1))
        assert stored[-1] == []
        assert _told(store, "flaky") == [("failed", "failed")]
    finally:
        svc.stop()
    again = service()  # a restart: the stored seen mark is the first failure's
    try:
        again.step(now + timedelta(seconds=2))
        assert _told(store, "flaky") == [("failed", "failed")]
        store.insert_runs([_run("flaky", now - timedelta(seconds=10), "succeeded")])
        again.step(now + timedelta(seconds=3))
        assert _told(store, "flaky") == [("failed", "failed"), ("recovered", "succeeded")]
        assert stored[-1] == ["job:flaky"]
    finally:
        again.stop()
        store.close()


def test_the_silent_gauge_follows_a_job_into_silence_and_out_of_it(store_url, tmp_path):
    """`chrono_job_silent` is set only when it changes, and still says each change."""
    from chronod.core.clock import Clock
    from chronod.daemon.metrics import Metrics
    from chronod.notify.service import NotifyService

    store = _spec_store(
        store_url, tmp_path, jobs_file(job("beat", "true", "http://127.0.0.1:9/", on=("failed",), max_silence_s=60))
    )
    now = datetime.now(timezone.utc).replace(microsecond=0)
    store.insert_runs([_run("beat", now - timedelta(seconds=30), "succeeded")])
    metrics = Metrics()
    svc = NotifyService(store, Clock(), lambda *a, **k: None, "n1", metrics=metrics, send=lambda route, body: None)

    def silent() -> float | None:
        return metrics.registry.get_sample_value("chrono_job_silent", {"job": "beat"})

    try:
        svc.step(now)
        assert silent() == 0
        svc.step(now + timedelta(seconds=45))  # 75 s after the success, past its 60 s
        assert silent() == 1
        svc.step(now + timedelta(seconds=46))
        assert silent() == 1
        store.insert_runs([_run("beat", now + timedelta(seconds=47), "succeeded")])
        svc.step(now + timedelta(seconds=48))
        assert silent() == 0
    finally:
        svc.stop()
        store.close()
