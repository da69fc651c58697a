"""Shell completion of what the user types most: job ids, run id prefixes, run states
and time zones (bash, zsh and fish alike, through typer's completion).

Completion must be quick and silent: every failure (no registry, no database, a bad
file) completes nothing rather than printing an error into the user's command line.
"""

from __future__ import annotations

import os
from typing import Any


def job_ids(incomplete: str) -> list[str]:
    """The job ids of the registry and the database starting with `incomplete`."""
    found: set[str] = set()
    try:
        from chronoctl import common

        reg = common.registry_dir(None)
        if reg.is_dir():
            found |= set(common.load([reg], common.now_utc(), secure=False).jobs)
    except Exception:  # completion never fails loudly
        pass
    try:
        from chronoctl import cmd_ops

        with cmd_ops.opened(os.environ.get("CHRONO_DB")) as store:
            found |= {j.job_id for j in store.jobs()}
    except Exception:
        pass
    return sorted(j for j in found if j.startswith(incomplete))


def jobs_and_runs(incomplete: str) -> list[str]:
    """Job ids, then the 8-character prefixes of recent runs, starting with `incomplete`."""
    out = job_ids(incomplete)
    try:
        from chronoctl import cmd_ops

        with cmd_ops.opened(os.environ.get("CHRONO_DB")) as store:
            runs = store.runs_by_prefix(incomplete, limit=50) if incomplete else store.runs(limit=20)
            out += sorted({r.run_id[:8] for r in runs if r.started_at is not None})
    except Exception:
        pass
    return out


def states(incomplete: str) -> list[str]:
    """The run states starting with `incomplete`."""
    from chronod.core.model import ACTIVE_STATES, TERMINAL_STATES

    return sorted(s for s in {*TERMINAL_STATES, *ACTIVE_STATES} if s.startswith(incomplete))


def zones(incomplete: str) -> list[str]:
    """The IANA zone names starting with `incomplete`."""
    from zoneinfo import available_timezones

    return sorted(z for z in available_timezones() if z.startswith(incomplete))


def job_argument(help_text: str = "A job id.", default: Any = ...) -> Any:
    """A JOB argument that completes job ids."""
    import typer

    return typer.Argument(default, metavar="JOB" if default is ... else "[JOB]", help=help_text, autocompletion=job_ids)
