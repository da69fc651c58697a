"""The checkout's chronod speaks systemd's notify protocol as the shipped unit expects
(Type=notify, WatchdogSec, ExecReload=kill -HUP): READY=1 after the first registry load,
WATCHDOG=1 at least every half interval even when idle, RELOADING=1 then READY=1 around a
SIGHUP, STOPPING=1 on SIGTERM. The installed package gets the same checks
(tests/system/test_deb_package.py)."""

from __future__ import annotations

import os

import pytest

from tests import sdnotify
from tests.integration.daemon_helpers import BIN, job, jobs_file, write_jobs

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sd_notify")]  # one conversation, on one worker


@pytest.fixture(scope="module")
def talk(tmp_path_factory) -> sdnotify.Conversation:
    tmp = tmp_path_factory.mktemp("sdnotify")
    reg = tmp / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "nightly.yaml", jobs_file(job("nightly", "0 4 * * *", "true")))  # idle all test long
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONO_")}
    argv = [str(BIN / "chronod"), "--registry", str(reg), "--db", str(tmp / "chrono.db")]
    return sdnotify.converse(argv, env, tmp / "notify.sock", tmp / "chronod.log")


def test_ready_comes_after_the_first_registry_load(talk):
    fields = talk.messages[talk.ready][1]
    assert fields.get("STATUS", "").startswith("1 jobs"), fields


def test_an_idle_daemon_pings_the_watchdog_every_half_interval(talk):
    half = sdnotify.WATCHDOG_USEC / 2e6
    gaps = talk.watchdog_gaps()
    assert len(gaps) >= sdnotify.IDLE_INTERVALS * 2, gaps
    assert max(gaps) <= half + 0.5, gaps


def test_a_sighup_is_bracketed_by_reloading_and_ready(talk):
    assert talk.hup_at <= talk.reloading < talk.ready_again
    assert "MONOTONIC_USEC" in talk.messages[talk.reloading][1]


def test_sigterm_says_stopping_and_exits_0(talk):
    assert talk.stopping > talk.ready_again
    assert talk.exit_status == 0, talk.log
