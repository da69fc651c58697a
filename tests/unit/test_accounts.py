"""Whether an account may run jobs: the shadow file's lock and expiry, decided at `now`."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from chronod.core.accounts import Account, parse_shadow, refusal

SHADOW = """\
root:*:20000:0:99999:7:::
open:$6$salt$hash:20000:0:99999:7:::
locked:!$6$salt$hash:20000:0:99999:7:::
nopass:!:20000::::::
star:*:20000::::::
neverset:!*:20000::::::
expired:$6$salt$hash:20000:0:99999:7::1:
later:$6$salt$hash:20000:0:99999:7::20500:
broken line
"""
AT = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)  # day 20454


@pytest.mark.parametrize(
    "name, why",
    [
        ("root", None),
        ("open", None),
        ("locked", "account locked is locked (usermod -L); unlock it with usermod -U"),
        ("nopass", None),  # a system account without a password is not locked
        ("star", None),
        ("neverset", None),
        ("expired", "account expired expired on 1970-01-02; extend it with usermod -e YYYY-MM-DD (or -e '' for never)"),
        ("later", None),
        ("unknown", None),  # not in the file: the start says whether the user exists
    ],
)
def test_an_account_is_refused_only_when_locked_or_expired(name, why):
    assert refusal(parse_shadow(SHADOW).get(name), AT) == why


def test_an_account_expires_at_the_start_of_its_expiry_day_in_utc():
    acct = Account("later", expires=date(2026, 2, 14))
    assert refusal(acct, datetime(2026, 2, 13, 23, 59, 59, tzinfo=timezone.utc)) is None
    assert "expired on 2026-02-14" in (refusal(acct, datetime(2026, 2, 14, tzinfo=timezone.utc)) or "")
