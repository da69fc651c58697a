"""What a job file controls in its notifications is bounded: a notify command's output and
time (a real chronod, a command printing gigabytes, the daemon's memory read from /proc)."""

from __future__ import annotations

import json
import re

import pytest

from tests.integration.daemon_helpers import Chronod, wait_until, write_jobs


def _vm(pid: int, field: str) -> int:
    """A /proc/<pid>/status memory field in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _notify_job(id_: str, routes: list[dict]) -> str:
    lines = [
        f"  - id: {id_}",
        "    owner: team",
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


@pytest.mark.slow
def test_a_notify_command_printing_gigabytes_leaves_the_daemons_memory_flat_and_one_that_never_ends_is_killed(
    tmp_path,
):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(
        reg / "a.yaml",
        _notify_job(
            "loud",
            [
                {"on": ["succeeded"], "command": "head -c 3000000000 /dev/zero", "timeout_s": 60},
                {"on": ["succeeded"], "command": "cat /dev/zero; cat /dev/zero >&2", "timeout_s": 3},
            ],
        ),
    )
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
