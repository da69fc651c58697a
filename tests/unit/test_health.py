"""The health judgement behind `chronoctl status` and its exit code (chronod.core.health)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from chronod.core.health import Probe, Verdict, judge, judge_job, node_health

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)


@dataclass
class N:
    name: str = "vm"
    hostname: str = "vm"
    pid: int = 1887
    token: int = 4
    started_at: datetime = NOW - timedelta(hours=1)
    heartbeat_at: datetime = NOW - timedelta(seconds=20)
    lease_expires_at: datetime = NOW + timedelta(seconds=580)
    stopped_at: datetime | None = None


def test_a_local_daemon_whose_process_is_gone_is_down_at_once_though_its_lease_runs():
    h = node_health(N(), NOW, Probe.GONE)
    assert h.state == "down" and h.crashed
    assert h.why == (
        "died: process 1887 is gone (last heartbeat 2026-12-04T11:59:40Z); its lease is held until 2026-12-04T12:09:40Z"
    )
    health = judge([h], [])
    assert health.verdict is Verdict.DOWN and health.exit_code == 3
    assert health.reasons[0] == "no chronod is running: nothing runs until one starts"


def test_a_reboot_kills_a_local_daemon_and_a_remote_one_lives_by_its_lease():
    assert node_health(N(), NOW, Probe.REBOOTED).state == "down"
    assert node_health(N(), NOW, Probe.REMOTE).state == "up"
    expired = N(lease_expires_at=NOW - timedelta(seconds=1))
    assert node_health(expired, NOW, Probe.REMOTE).why == "no heartbeat since 2026-12-04T11:59:40Z: its lease ended"
    assert node_health(N(stopped_at=NOW), NOW, Probe.GONE).state == "stopped"


def test_healthy_degraded_and_down_have_their_exit_codes():
    up = node_health(N(), NOW, Probe.RUNNING)
    assert judge([up], []).exit_code == 0
    bad_file = {"node": "vm", "file": "/etc/chrono/jobs.d/a.yaml", "line": 3, "message": "unknown key 'shedule'"}
    degraded = judge([up], [bad_file])
    assert degraded.exit_code == 1
    assert degraded.reasons == ("registry errors in 1 file (the last good version runs)",)
    quarantine = {"node": "vm", "file": "/x.yaml", "line": 1, "message": "job 'a' is quarantined: boom; the others"}
    assert judge([up], [quarantine]).reasons == ("1 job quarantined",)
    dead_peer = node_health(N(name="b", hostname="b", lease_expires_at=NOW - timedelta(1)), NOW, Probe.REMOTE)
    fleet = judge([up, dead_peer], [])
    assert fleet.exit_code == 1 and fleet.reasons[0].startswith("chronod b on b is down: no heartbeat since")
    assert judge([], []).exit_code == 3


def test_status_job_is_degraded_only_by_its_own_file_or_quarantine():
    up = judge([node_health(N(), NOW, Probe.RUNNING)], [])
    other = [{"file": "/other.yaml", "line": 1, "message": "bad"}]
    assert judge_job(up, "a", "/a.yaml", other).exit_code == 0
    mine = [{"file": "/a.yaml", "line": 1, "message": "bad"}]
    assert judge_job(up, "a", "/a.yaml", mine).reasons == (
        "its file /a.yaml has registry errors: its last good version runs",
    )
    held = [{"file": "/b.yaml", "line": 1, "message": "job 'a' is quarantined: schedule raised"}]
    assert judge_job(up, "a", "/a.yaml", held).reasons == ("a is quarantined: the daemon set it aside",)
    down = judge([node_health(N(), NOW, Probe.GONE)], [])
    assert judge_job(down, "a", "/a.yaml", []).exit_code == 3
