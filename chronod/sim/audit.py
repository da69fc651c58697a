"""The audit commands as an operator runs them, asked about a simulation: `chronoctl
missed --json` in-process, its clock set to the simulation's end."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from unittest import mock


def missed_now(out: Any) -> dict[str, tuple[str, datetime]]:
    """run_id -> (job, scheduled_at) of every occurrence `chronoctl missed` lists over the
    whole simulation, asked at its end."""
    from typer.testing import CliRunner

    from chronoctl.main import build_app

    since = int((out.end - out.start).total_seconds()) + 60
    with mock.patch("chronoctl.common.now_utc", return_value=out.end):
        res = CliRunner().invoke(build_app(), ["missed", "--since", f"{since}s", "--db", str(out.db_path), "--json"])
    if res.exit_code not in (0, 1):
        raise RuntimeError(f"chronoctl missed failed ({res.exit_code}): {res.output[-500:]}")
    data = json.loads(res.stdout)
    return {
        m["run_id"]: (m["job_id"], datetime.fromisoformat(m["scheduled_at"]))
        for group in data["owners"]
        for m in group["missed"]
    }
