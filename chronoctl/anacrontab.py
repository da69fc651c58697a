"""/etc/anacrontab -> chrono jobs, as Debian's anacron 2.3 reads and runs it (pure).

anacron does not keep time itself: something starts it (on Debian, `anacron.timer` at
`*-*-* 07..23:30` with up to 5 minutes of random delay, `/etc/cron.d/anacron` at the same
minutes where systemd is not PID 1, and the boot). Each time, a job whose timestamp
(`/var/spool/anacron/ID`, the date it last started) is `period` days old or more starts after `delay` minutes and
its timestamp becomes today (`@monthly` and `@yearly` wait a number of days too:
named_period_days). So on a host that is up, a daily job runs once a day at
07:30 + delay; after days switched off it runs once, not once per missed day, at the first
start of anacron (checked against the real anacron on a fake clock: tests/realcron/run_anacron_cases.py).

The imported job runs where anacron would have first run it on a host that is up (07:30 +
delay, every `period` days counted from the timestamp, or on the 1st for `@monthly`), with
`catchup: latest`: after downtime the missed run happens once, when chronod starts.

Lines: `period delay id command` (blanks or tabs between), `NAME = value` (blanks around the
name removed, the value kept as written), `#` comments, a trailing `\\` continues a line.
Debian's anacron has no START_HOURS_RANGE or RANDOM_DELAY (cronie's has): with the
`debian` flavour they are ordinary variables the jobs see; with `cronie` they are honoured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

START_HOUR = 7  # anacron.timer: *-*-* 07..23:30
START_MINUTE = 30
TIMER_DELAY_S = 300  # anacron.timer's RandomizedDelaySec=5m
_NAMED: dict[str, int | str] = {
    "@monthly": "monthly",
    "@yearly": "yearly",
    "@annually": "yearly",
    "@daily": 1,
    "@weekly": 7,
}
_DEBIAN_NAMED = ("@monthly", "@yearly")


@dataclass(frozen=True)
class AnacronEntry:
    """One job line."""

    file: str
    line: int
    period: int | str  # days, or "monthly" / "yearly"
    delay_min: int
    ident: str
    command: str
    env: tuple[tuple[str, str], ...]
    text: str


@dataclass
class Anacrontab:
    entries: list[AnacronEntry] = field(default_factory=list)
    errors: list[tuple[int, str, str]] = field(default_factory=list)  # (line, message, hint)


_ENV = re.compile(r"^\s*([^=\s]+)\s*=(.*)$")


def parse_anacrontab(text: str, file: str, flavor: str = "debian") -> Anacrontab:
    out = Anacrontab()
    env: dict[str, str] = {}
    lines = text.split("\n")
    number = 0
    while number < len(lines):
        raw = lines[number]
        number += 1
        first = number
        while raw.endswith("\\") and number < len(lines):
            raw = raw[:-1] + lines[number]
            number += 1
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        words = stripped.split(None, 3)
        m = _ENV.match(raw)
        if m and (len(words) < 4 or "=" in words[0]):
            env[m.group(1)] = m.group(2)
            continue
        if len(words) < 4:
            out.errors.append((first, f"{stripped!r} is not a job line", "write: period delay job-identifier command"))
            continue
        period_text, delay_text, ident, command = words
        period: int | str
        if period_text.startswith("@"):
            named = _NAMED.get(period_text)
            if named is None or (flavor == "debian" and period_text not in _DEBIAN_NAMED):
                allowed = ", ".join(_DEBIAN_NAMED if flavor == "debian" else _NAMED)
                out.errors.append(
                    (first, f"unknown named period {period_text!r}: anacron skips this line", f"use {allowed} or days")
                )
                continue
            period = named
        elif period_text.isdigit():
            period = int(period_text)
        else:
            out.errors.append((first, f"period {period_text!r} is not a number of days: anacron skips this line", ""))
            continue
        if not delay_text.isdigit() or "/" in ident:
            out.errors.append(
                (first, "invalid syntax: anacron skips this line", "the delay is minutes; ids have no '/'")
            )
            continue
        out.entries.append(
            AnacronEntry(file, first, period, int(delay_text), ident, command, tuple(env.items()), stripped)
        )
    return out


def _month_days(year: int, month: int) -> int:
    nxt = date(year + (month == 12), month % 12 + 1, 1)
    return (nxt - date(year, month, 1)).days


def named_period_days(period: str, today: date) -> int:
    """How many days Debian's anacron waits for `@monthly` and `@yearly` (measured with the
    real anacron on a fake clock, tests/fixtures/anacron): the shorter of the last month and
    this one (Feb 2027: 28; May: 30), and of the last year and this one (365)."""
    if period == "monthly":
        before = today.replace(day=1) - timedelta(days=1)
        return min(_month_days(before.year, before.month), _month_days(today.year, today.month))
    days = [(date(y + 1, 1, 1) - date(y, 1, 1)).days for y in (today.year - 1, today.year)]
    return min(days)


def due(period: int | str, last: date | None, today: date) -> bool:
    """Whether anacron starts the job today (its timestamp is `last`): never run, or at least
    `period` days since (for `@monthly` and `@yearly`, named_period_days). A job that missed
    several periods while the host was off starts once."""
    if last is None:
        return True
    wait = named_period_days(period, today) if isinstance(period, str) else period
    return (today - last).days >= wait


def _hours_range(env: dict[str, str]) -> tuple[int, int] | None:
    m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", env.get("START_HOURS_RANGE", ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def schedule_for(entry: AnacronEntry, last: date | None) -> tuple[str, list[str]]:
    """The chrono schedule of a job, and why it is not exactly anacron's (empty: it is)."""
    total = START_HOUR * 60 + START_MINUTE + entry.delay_min
    hour, minute = divmod(total, 60)
    differs: list[str] = []
    if hour >= 24:
        differs.append(f"a delay of {entry.delay_min} minutes runs past midnight; chrono runs it at 23:{minute:02d}")
        hour = 23
    if entry.period == "monthly":
        differs.append(
            "anacron's @monthly waits the shorter of last month's and this month's days since the last run, so "
            "its day drifts (a run on 1 March is followed by one on 29 March); chrono runs it on the 1st"
        )
        return f"{minute} {hour} 1 * *", differs
    if entry.period == "yearly":
        differs.append(
            "anacron's @yearly waits 365 days since the last run (its date drifts); chrono runs it on 1 January"
        )
        return f"{minute} {hour} 1 1 *", differs
    assert isinstance(entry.period, int)
    if entry.period <= 1:
        return f"{minute} {hour} * * *", differs
    if entry.period == 7:
        weekday = ((last + timedelta(days=7)).isoweekday() % 7) if last else 1
        if last is None:
            differs.append(
                "never run yet: anacron would run it at its next start, then weekly; chrono weekly on Mondays"
            )
        return f"{minute} {hour} * * {weekday}", differs
    differs.append(
        f"every {entry.period} days counted from the last run: chrono's nearest form is @every {entry.period}d, "
        "counted from the epoch (the same period, another day)"
    )
    return f"@every {entry.period}d", differs


def anacron_job(
    entry: AnacronEntry, job_id: str, host_timezone: str, last: date | None, flavor: str = "debian"
) -> tuple[dict[str, Any], list[str], list[str]]:
    """(job, why it differs from anacron, notes) for one line; `last` is its timestamp."""
    env = dict(entry.env)
    schedule, differs = schedule_for(entry, last)
    notes = [
        f"anacron's start (anacron.timer, 07:30) plus this line's delay of {entry.delay_min} min; "
        "after downtime the missed run happens once when chronod starts (catchup: latest), as anacron "
        "runs a missed job once"
    ]
    tolerance = TIMER_DELAY_S
    if flavor == "cronie":
        random_delay = env.get("RANDOM_DELAY", "").strip()
        if random_delay.isdigit():
            tolerance += int(random_delay) * 60
        window = _hours_range(env)
        if window and not window[0] <= int(schedule.split()[1] if schedule[0].isdigit() else 0) < window[1]:
            differs.append(f"START_HOURS_RANGE={window[0]}-{window[1]} excludes the hour chrono runs it")
        if window:
            differs.append(
                f"START_HOURS_RANGE={window[0]}-{window[1]}: anacron starts missed jobs only in these hours; "
                "chrono catches up whenever chronod starts"
            )
    else:
        for name in ("START_HOURS_RANGE", "RANDOM_DELAY"):
            if name in env:
                notes.append(f"{name} is an ordinary variable for Debian's anacron (cronie's honours it): kept in env")
    shell = env.get("SHELL", "/bin/sh")
    job: dict[str, Any] = {
        "id": job_id,
        "owner": "root",
        "schedule": schedule,
        "timezone": host_timezone,
        "command": entry.command,
        "user": "root",
        "shell": shell,
        "workdir": env.get("HOME", "/root"),
        "env": {k: v for k, v in env.items() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) and k != "LOGNAME"},
        "idempotency_class": "unsafe",
        "tolerance_s": tolerance,
        "tolerance_reason": f"anacron.timer's random delay (RandomizedDelaySec=5m) for {entry.file}:{entry.line}",
        "overlap": "forbid",
        "catchup": "latest",
        "run_on": "each",
    }
    if not job["env"]:
        del job["env"]
    notes.append(
        f"anacron starts it between 07:30 and 07:35 (anacron.timer's random delay) plus {entry.delay_min} min on a "
        f"host that is up; chrono at {schedule!r} plus a fixed jitter of up to {tolerance} s: an instant anacron "
        "could have chosen"
    )
    return job, differs, notes
