"""Integration tests start real daemons: none may outlive its test, pass or fail."""

from __future__ import annotations

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
