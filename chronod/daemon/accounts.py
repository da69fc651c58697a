"""The shadow file, read for `chronod.core.accounts` before each launch (as cron's PAM
account check does). Only a root daemon reads it; a daemon that cannot (a per-user
daemon runs its own jobs) knows no account and refuses none.

The file is parsed again only when it changed (inode, size, modification time): one
`stat` per launch, so a burst of launches reads it once.
"""

from __future__ import annotations

import os

from chronod.core.accounts import Account, parse_shadow

SHADOW = "/etc/shadow"


class ShadowAccounts:
    """Accounts from /etc/shadow (or `path`), re-read when the file changes."""

    def __init__(self, path: str = SHADOW) -> None:
        self.path = path
        self._seen: tuple[int, int, int, int] | None = None
        self._accounts: dict[str, Account] = {}

    def account(self, user: str) -> Account | None:
        """The account `user`, or None when the file does not name it or cannot be read."""
        try:
            st = os.stat(self.path)
            seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if seen != self._seen:
                with open(self.path, encoding="utf-8", errors="replace") as f:
                    self._accounts = parse_shadow(f.read())
                self._seen = seen
        except OSError:
            self._seen, self._accounts = None, {}
        return self._accounts.get(user)


class NoAccounts:
    """No account is known (the simulation; a daemon that may not read the shadow file)."""

    def account(self, user: str) -> Account | None:
        """Always None."""
        return None
