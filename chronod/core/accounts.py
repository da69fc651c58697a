"""Whether an account may run jobs now: cron asks PAM's account check before each job,
chrono asks this (docs/reference.md, Run states: `skipped_account`).

An account is refused when it is *locked* (`usermod -L`, `passwd -l`: its password field
is `!` followed by a password hash) or *expired* (`usermod -e DATE`: the shadow file's
expiry day has come, as pam_unix counts it). An account without a password (`*`, `!`
or `!*` alone, as system accounts have) is not locked: its jobs run, as under cron.

Pure: `parse_shadow` reads the text of /etc/shadow, `refusal` decides at `now`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

EPOCH = date(1970, 1, 1)


@dataclass(frozen=True)
class Account:
    """What /etc/shadow says of one account that decides whether it may run jobs."""

    name: str
    locked: bool = False
    expires: date | None = None  # the first day it is expired on (sp_expire); None: never


def parse_shadow(text: str) -> dict[str, Account]:
    """The accounts of a shadow file (`name:password:lastchg:min:max:warn:inactive:expire:`);
    lines that are not shadow entries are skipped."""
    accounts: dict[str, Account] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) < 8 or not fields[0]:
            continue
        accounts[fields[0]] = Account(fields[0], _locked(fields[1]), _day(fields[7]))
    return accounts


def _locked(password: str) -> bool:
    rest = password[1:]
    return password.startswith("!") and rest not in ("", "*") and not rest.startswith("!")


def _day(text: str) -> date | None:
    try:
        days = int(text)
    except ValueError:
        return None
    if days < 0:
        return None
    return EPOCH + timedelta(days=days)


def refusal(account: Account | None, now: datetime) -> str | None:
    """Why `account` may not run a job at `now` (an aware datetime), or None when it may.
    An account the shadow file does not name (or one chrono may not read) is not refused:
    the start itself says whether the user exists."""
    if account is None:
        return None
    if account.locked:
        return f"account {account.name} is locked (usermod -L); unlock it with usermod -U"
    if account.expires is not None and now.date() >= account.expires:
        return (
            f"account {account.name} expired on {account.expires.isoformat()}; "
            f"extend it with usermod -e YYYY-MM-DD (or -e '' for never)"
        )
    return None
