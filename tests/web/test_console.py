"""The web console through Flask's test client: every view, escaping of hostile text,
authentication, CSRF and the read-only default."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from chronoctl.errors import UsageError
from chronoctl.web.access import Access, check_listen, make_access, parse_listen
from chronoctl.web.app import create_app
from chronod.core.model import JobSpec
from chronod.paths import live_output
from chronod.store.sql import SqlStore
from tests.web import ledger

pytestmark = pytest.mark.xdist_group("web-console")  # one ledger for the module, built once
NOW = datetime.now(timezone.utc).replace(microsecond=0)
TOKEN = "s3cret-token-for-the-console-0001"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> tuple[str, dict[str, str], Path]:
    d = tmp_path_factory.mktemp("web")
    url = str(d / "chrono.db")
    daemon = ledger.stand_in()
    ids = ledger.build(url, NOW, pid=daemon.pid, live_dir=d / "state")
    yield url, ids, d / "state"
    daemon.kill()
    daemon.wait()


@pytest.fixture
def store(db):
    st = SqlStore(db[0])
    yield st
    st.close()


def client(store, **kw):
    kw.setdefault("clock", lambda: NOW)
    app = create_app(store, **kw)
    app.testing = True
    return app.test_client()


def text(resp) -> str:
    return resp.get_data(as_text=True)


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def signed_in(store, **kw):
    c = client(store, access=Access(tokens=(("alice", TOKEN),)), **kw)
    page = c.get("/login")
    r = c.post("/login", data={"token": TOKEN, "csrf": csrf_of(text(page))})
    assert r.status_code == 302, text(r)
    return c


# --- every view --------------------------------------------------------------------------


def test_the_overview_lists_every_job_with_its_schedule_in_words_last_run_next_fire_and_hold(store):
    r = client(store).get("/")
    assert r.status_code == 200
    html = text(r)
    for job in ("billing-export", "metrics.rollup", "reports.weekly"):
        assert f">{job}</a>" in html
    assert "at 02:00 every day" in html
    assert "INC-7 upstream down" in html  # the paused job's hold
    assert "Health:" in html and "web-n1" in html  # the node, judged as `status` judges it


@pytest.mark.parametrize(
    "query, shown, hidden",
    [
        ("tag=billing", "billing-export", "metrics.rollup"),
        ("owner=platform", "metrics.rollup", "billing-export"),
        ("state=held", "reports.weekly", "billing-export"),
        ("q=rollup", "metrics.rollup", "reports.weekly"),
        ("state=running", "metrics.rollup", "reports.weekly"),
        ("state=failing", "evil.", "billing-export"),
        ("state=ok", "billing-export", "evil."),
        ("state=never", "no job matches", "billing-export"),
    ],
)
def test_the_overview_filters_by_tag_owner_state_and_text(store, query, shown, hidden):
    html = text(client(store).get(f"/?{query}"))
    assert f">{shown}" in html
    assert f">{hidden}</a>" not in html


def test_a_job_page_has_its_heat_map_totals_verdicts_next_fires_and_runs(store, db):
    html = text(client(store).get("/job/billing-export"))
    cells = re.findall(r'class="cell l-(\w+)" href="/job/billing-export/day/([\d-]+)"', html)
    assert len(cells) == 90
    levels = dict((d, lv) for lv, d in cells)
    for back in (3, 17, 40, 41, 77, ledger.MISSING_NIGHT):
        assert levels[(NOW.date() - timedelta(days=back)).isoformat()] == "bad"
    assert levels[(NOW.date() - timedelta(days=5)).isoformat()] == "ok"
    assert "failed 5" in html and "missing 1" in html
    assert "Did it run?" in html and "Next fires" in html
    assert 'href="/run/' in html


def test_a_heat_map_cell_links_to_that_days_occurrences_with_their_reasons(store):
    day = (NOW.date() - timedelta(days=ledger.MISSING_NIGHT)).isoformat()
    html = text(client(store).get(f"/job/billing-export/day/{day}"))
    assert "MISSING: no record at all" in html
    day = (NOW.date() - timedelta(days=3)).isoformat()
    html = text(client(store).get(f"/job/billing-export/day/{day}"))
    assert "failed" in html and "exit code 3" in html


def test_the_job_page_reads_the_heat_map_in_one_query_of_runs(store, monkeypatch):
    calls = []
    real = store.runs

    def counted(*a, **kw):
        calls.append((a, kw))
        return real(*a, **kw)

    monkeypatch.setattr(store, "runs", counted)
    client(store).get("/job/billing-export")
    ninety = [
        c
        for c in calls
        if c[1].get("since") and c[1].get("until") and c[1]["until"] - c[1]["since"] > timedelta(days=80)
    ]
    assert len(ninety) == 1  # the heat map: one query for the 90 days, not one per day


def test_a_run_page_shows_attempts_states_reasons_exit_codes_node_and_output(store, db):
    html = text(client(store).get(f"/run/{db[1]['failed']}"))
    assert "Attempts" in html and "web-n1" in html
    assert html.count('s-failed">failed</span>') == 2 and 'id="run-state">failed' in html  # two attempts, the run
    assert "exit code 3" in html and "error: x" in html


def test_a_running_runs_output_is_read_live_from_its_file(store, db):
    url, ids, state = db
    path = live_output(str(state), ids["running"], 1)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(b"line one\n<b>two</b>\n\x1b[31mred \xe2\x82")  # a colour, half a euro sign
    c = client(store)
    html = text(c.get(f"/run/{ids['running']}"))
    assert 'id="live-output"' in html and 'data-live="/run/' in html
    got = c.get(f"/run/{ids['running']}/live?attempt=1&offset=0").get_json()
    assert got["text"] == "line one\n<b>two</b>\n\\x1b[31mred " and got["state"] == "running" and not got["done"]
    with open(path, "ab") as f:
        f.write(b"\xac\n")
    more = c.get(f"/run/{ids['running']}/live?attempt=1&offset={got['offset']}").get_json()
    assert more["text"] == "\u20ac\n"  # the euro sign read whole once its last byte came


def test_missed_and_backfills_views(store):
    html = text(client(store).get("/missed?since=30d"))
    assert "billing-export" in html and "no record: it fell due" in html
    assert client(store).get("/missed?since=nonsense").status_code == 400
    assert client(store).get("/backfills").status_code == 200


def test_an_unknown_job_or_run_is_404(store):
    assert client(store).get("/job/nope").status_code == 404
    assert client(store).get("/run/0000000000000000").status_code == 404


# --- hostile text ------------------------------------------------------------------------


@pytest.mark.parametrize("page", ["/", "job", "run", "/missed?since=3d", "day"])
def test_hostile_job_ids_tags_reasons_and_output_render_as_text(store, db, page):
    ids = db[1]
    from urllib.parse import quote

    job = quote(ledger.HOSTILE_JOB, safe="")
    day = (NOW.date() - timedelta(days=1)).isoformat()
    path = {"job": f"/job/{job}", "run": f"/run/{ids['hostile_run']}", "day": f"/job/{job}/day/{day}"}.get(page, page)
    r = client(store).get(path)
    assert r.status_code == 200, path
    html = text(r)
    assert "<script>" not in html and "<b>" not in html.replace("<b>two</b>", "") and "<i>" not in html
    assert "\x1b" not in html  # control characters are shown escaped, as chronoctl does
    if page != "/missed?since=3d":
        assert "&lt;script&gt;" in html
    assert "script-src 'self'" in r.headers["Content-Security-Policy"]


# --- headers, access, CSRF ---------------------------------------------------------------


def test_every_page_carries_strict_security_headers(store):
    r = client(store).get("/")
    h = r.headers
    assert (
        "default-src 'self'" in h["Content-Security-Policy"]
        and "frame-ancestors 'none'" in h["Content-Security-Policy"]
    )
    assert "unsafe-inline" not in h["Content-Security-Policy"]
    assert h["X-Frame-Options"] == "DENY" and h["X-Content-Type-Options"] == "nosniff"
    assert h["Referrer-Policy"] == "same-origin"
    assert "<script>" not in text(r) and "onclick" not in text(r)  # no inline script at all


def test_without_authentication_only_a_loopback_host_header_is_answered(store):
    c = client(store)
    assert c.get("/", headers={"Host": "127.0.0.1:8470"}).status_code == 200
    assert c.get("/", headers={"Host": "evil.example:8470"}).status_code == 421  # DNS rebinding
    assert c.get("/", headers={"Host": "[::1]:8470"}).status_code == 200
    assert c.get("/", headers={"Host": "[2001:db8::1]:8470"}).status_code == 421


def test_a_non_loopback_listen_is_refused_without_authentication():
    with pytest.raises(UsageError, match="without authentication"):
        check_listen("0.0.0.0", Access())
    check_listen("127.0.0.1", Access())
    check_listen("::1", Access())
    check_listen("0.0.0.0", Access(tokens=(("a", TOKEN),)))
    check_listen("0.0.0.0", Access(proxies=frozenset({"10.0.0.5"}), user_header="X-User"))
    assert parse_listen("8000") == ("127.0.0.1", 8000)
    assert parse_listen("[::1]:9") == ("::1", 9)


def test_a_token_file_must_be_private_and_its_tokens_long(tmp_path):
    f = tmp_path / "tokens"
    f.write_text(f"alice {TOKEN}\n")
    f.chmod(0o644)
    with pytest.raises(UsageError, match="readable or writable by others") as e:
        make_access(f, [], None)
    assert e.value.hint == f"chmod 600 {f}"
    f.chmod(0o600)
    assert make_access(f, [], None).tokens == (("alice", TOKEN),)
    f.write_text("bob short\n")
    with pytest.raises(UsageError, match=":1: the token of 'bob'"):
        make_access(f, [], None)
    with pytest.raises(UsageError, match="go together"):
        make_access(None, ["10.0.0.1"], None)


def test_a_token_works_and_a_wrong_one_does_not(store):
    c = client(store, access=Access(tokens=(("alice", TOKEN),)))
    assert c.get("/").status_code == 302  # to the sign-in page
    assert c.get("/", headers={"Authorization": "Bearer wrong-token-wrong-token"}).status_code == 302
    assert c.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    page = text(c.get("/login"))
    assert c.post("/login", data={"token": "nope", "csrf": csrf_of(page)}).status_code == 401
    c = signed_in(store)
    html = text(c.get("/"))
    assert "alice" in html


def test_a_trusted_proxy_names_the_user_and_nobody_else_can(store):
    access = Access(proxies=frozenset({"10.0.0.5"}), user_header="X-Forwarded-User")
    c = client(store, access=access)
    ok = c.get("/", headers={"X-Forwarded-User": "carol"}, environ_base={"REMOTE_ADDR": "10.0.0.5"})
    assert ok.status_code == 200 and "carol" in text(ok)
    assert (
        c.get("/", headers={"X-Forwarded-User": "carol"}, environ_base={"REMOTE_ADDR": "10.0.0.6"}).status_code == 401
    )


def test_actions_are_refused_without_allow_actions(store):
    c = signed_in(store)
    html = text(c.get("/job/billing-export"))
    assert 'id="pause"' not in html
    r = c.post("/job/billing-export/pause", data={"reason": "x", "csrf": csrf_of(html)})
    assert r.status_code == 403 and "read-only" in text(r)
    assert store.get_job("billing-export").paused is False


def test_actions_need_post_and_a_csrf_token(store):
    c = signed_in(store, allow_actions=True)
    assert c.get("/job/billing-export/pause").status_code in (404, 405)  # GET never acts
    r = c.post("/job/billing-export/pause", data={"reason": "x"})
    assert r.status_code == 403 and "CSRF" in text(r)
    html = text(c.get("/job/billing-export"))
    r = c.post(
        "/job/billing-export/pause",
        data={"reason": "x", "csrf": csrf_of(html)},
        headers={"Origin": "https://evil.example"},
    )
    assert r.status_code == 403
    assert store.get_job("billing-export").paused is False


def test_a_pause_through_the_console_records_the_signed_in_name_and_resume_lifts_it(store):
    c = signed_in(store, allow_actions=True, clock=None)  # the pause is stamped with the database's clock
    html = text(c.get("/job/metrics.rollup"))
    r = c.post("/job/metrics.rollup/pause", data={"reason": "INC-9 <b>db</b>", "csrf": csrf_of(html)})
    assert r.status_code == 302
    row = store.get_job("metrics.rollup")
    assert row.paused and row.paused_by == "alice" and row.paused_reason == "INC-9 <b>db</b>"
    html = text(c.get("/job/metrics.rollup"))
    assert "paused by alice" in html and "&lt;b&gt;db" in html
    c.post("/job/metrics.rollup/resume", data={"csrf": csrf_of(html)})
    assert store.get_job("metrics.rollup").paused is False


def test_allow_actions_without_a_way_to_sign_in_is_refused(tmp_path, db):
    from typer.testing import CliRunner

    from chronoctl.main import build_app

    r = CliRunner().invoke(build_app("web"), ["web", "--allow-actions", "--db", db[0]])
    assert r.exit_code != 0
    r = CliRunner().invoke(build_app("web"), ["web", "--listen", "0.0.0.0:0", "--db", db[0]])
    assert r.exit_code != 0


def test_run_now_queues_a_manual_run_requested_by_the_signed_in_name(store):
    import json

    import sqlalchemy as sa

    from chronod.store import schema

    c = signed_in(store, allow_actions=True, clock=None)  # the node's lease is judged on the real clock
    html = text(c.get("/job/billing-export"))
    r = c.post("/job/billing-export/trigger", data={"csrf": csrf_of(html)})
    assert r.status_code == 302, text(r)
    with store.engine.begin() as conn:
        rows = conn.execute(sa.select(schema.requests).where(schema.requests.c.job_id == "billing-export")).all()
    assert len(rows) == 1 and rows[0].kind == "trigger"
    payload = json.loads(rows[0].payload_json)
    assert payload["user"] == "alice" and payload["run_id"]


def test_a_failing_database_is_a_503_that_names_it_without_its_password(store, monkeypatch):
    from chronod.store.api import StoreError

    def down(*a, **kw):
        raise StoreError("connection refused: postgresql://chrono:hunter2@db/chrono")

    monkeypatch.setattr(store, "jobs", down)
    r = client(store).get("/")
    assert r.status_code == 503
    assert "failed: connection refused" in text(r) and "hunter2" not in text(r)


def test_a_job_too_frequent_for_90_days_shows_the_last_days_that_fit(tmp_path):
    """A job every 5 s falls due 1,555,200 times in 90 days, more than one report lists:
    its page took seconds and showed an error where the heat map goes. It shows the last
    days that hold at most 100,000 (5 for this job), and says so."""
    url = str(tmp_path / "chrono.db")
    past = SqlStore(url, now=lambda: NOW - timedelta(days=100))  # registered 100 days ago
    past.upgrade()
    past.sync_jobs(
        "n1",
        [JobSpec(id="tick", owner="ops", schedule="*/5 * * * * *", command="true", idempotency_class="idempotent")],
    )
    past.close()
    st = SqlStore(url)
    try:
        resp = client(st).get("/job/tick")
        html = text(resp)
        assert resp.status_code == 200 and 'class="error"' not in html, html
        assert "Last 5 days" in html and "falls due too often for a heat map of 90 days" in html
        assert len(re.findall(r'class="cell l-\w+" href="/job/tick/day/', html)) == 5
    finally:
        st.close()
