"""Integration tests start real daemons: none may outlive its test, pass or fail."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.integration import daemon_helpers


@pytest.fixture(autouse=True)
def _no_daemon_outlives_its_test():
    yield
    while daemon_helpers.STARTED:
        d = daemon_helpers.STARTED.pop()
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait(10)


@pytest.fixture(scope="session")
def debian_cron():
    """Debian's cron binary: installed with apt-get when missing (root only), else skip loudly.
    Shared by the tests that run the real daemon (the cutover, the environment lines): CI
    installs it once per run, a few seconds with the package lists present."""
    found = shutil.which("cron") or ("/usr/sbin/cron" if os.path.exists("/usr/sbin/cron") else None)
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(
            "SKIPPED A REAL-CRON TEST: Debian's cron is not installed and this is not root "
            "with apt-get; run the suite as root on Debian (as CI does) to check chrono against cron"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Tests run in parallel: the package test may hold dpkg's lock, so apt-get waits for it.
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends", "cron"]
    res = subprocess.run(install, capture_output=True, env=env, check=False)
    if res.returncode != 0:
        subprocess.run(
            ["apt-get", "-o", "DPkg::Lock::Timeout=600", "update"], capture_output=True, env=env, check=False
        )
        res = subprocess.run(install, capture_output=True, env=env, check=False)
    if res.returncode != 0 or not os.path.exists("/usr/sbin/cron"):
        pytest.skip(
            "SKIPPED A REAL-CRON TEST: `apt-get install cron` failed: " + res.stderr.decode(errors="replace")[-500:]
        )
    return "/usr/sbin/cron"
