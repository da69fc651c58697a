"""The SQLite file under a running daemon: noticed when it is unlinked, replaced or
truncated, and put back from the copy the daemon still holds open.

`rm chrono.db*` does not stop a daemon: its connections keep the unlinked inode and go on
writing there, and every run recorded meanwhile would vanish with the last close. So the
watch holds one read connection of its own, and every CHECK_EVERY_S compares the device
and inode of the file that connection has open (found through /proc/self/fd) with what
the path names now. When they differ, it copies the open database with SQLite's backup
API (a consistent snapshot, WAL included) to a new file beside the path, puts whatever
now sits at the path aside (`<name>.replaced-<time>`, with its -wal and -shm), renames
the copy into place, and makes the store's pool open the restored file. A file truncated
in place cannot be copied back (the inode itself lost its pages): that is logged as an
error with the same loudness and counted, and the daemon goes on with what it has.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable

CHECK_EVERY_S = 2.0
_SQLITE_HEADER = 100  # a database file shorter than its header is no database


class DbWatch:
    """The watch of one SQLite store. `check(now_monotonic)` from the loop; `next_check` is
    the monotonic time the loop should wake for it (0: never, e.g. on PostgreSQL)."""

    def __init__(self, path: str | None, engine: Any, log: Callable[..., None], counter: Any):
        self.path = Path(path) if path else None
        self._engine, self._log, self._counter = engine, log, counter
        self._held: sqlite3.Connection | None = None
        self._held_fd: int | None = None
        self._truncated = False
        self.next_check = 0.0
        if self.path is not None:
            self._hold()  # the first check comes with the loop's first housekeeping

    @classmethod
    def for_store(cls, store: Any, log: Callable[..., None], counter: Any) -> "DbWatch":
        """A watch for `store` when it is an SQLite file; an idle one otherwise."""
        url = getattr(store, "engine", None) and store.engine.url
        database = url.database if url is not None and url.get_backend_name() == "sqlite" else None
        return cls(
            database if database not in (None, "", ":memory:") else None, store.engine if url else None, log, counter
        )

    # --- checking ---------------------------------------------------------------------
    def check(self, mono: float) -> None:
        if self.path is None or mono < self.next_check:
            return
        self.next_check = mono + CHECK_EVERY_S
        what = self.trouble()
        if what == "truncated" and self._truncated:
            return  # said once; said again only if it happens again after the file grew back
        self._truncated = what == "truncated"
        if what == "truncated":
            self._log(
                "db.truncated",
                "error",
                path=self.path,
                why="the database file was truncated in place; what it held is gone from disk",
                hint="stop chronod and restore the database from a backup",
            )
            self._counter.labels("truncated").inc()
        elif what is not None:
            self.restore(what)

    def trouble(self) -> str | None:
        """'unlinked', 'replaced', 'truncated' or None."""
        held = self._held_identity()
        try:
            st = os.stat(self.path)  # type: ignore[arg-type]
        except FileNotFoundError:
            return "unlinked"
        except OSError:
            return None  # unreadable for a moment (a permission change): nothing to restore from here
        if held is not None and (st.st_dev, st.st_ino) != held:
            return "replaced"
        if st.st_size < _SQLITE_HEADER:
            return "truncated"
        return None

    def _held_identity(self) -> tuple[int, int] | None:
        """Device and inode of the database file our own connection has open."""
        if self._held_fd is None:
            return None
        try:
            st = os.fstat(self._held_fd)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    # --- restoring --------------------------------------------------------------------
    def restore(self, what: str) -> None:
        """Copy the open database back to its path (see the module docstring)."""
        assert self.path is not None and self._held is not None
        stamp = time.strftime("%Y%m%dT%H%M%S")
        tmp = self.path.with_name(f".{self.path.name}.restore-{os.getpid()}")
        try:
            for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
                leftover.unlink(missing_ok=True)
            copy = sqlite3.connect(str(tmp))
            try:
                self._held.backup(copy)
                copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
            finally:
                copy.close()
            _fsync(tmp)
            self._engine.dispose()  # the pool's connections still point at the old inode
            self._release()
            aside = self._put_aside(stamp) if what == "replaced" else []
            for stale in (Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
                if stale.exists():
                    stale.rename(stale.with_name(f"{stale.name}.stale-{stamp}"))
            os.replace(tmp, self.path)
            _fsync(self.path.parent)
        except (OSError, sqlite3.Error) as e:
            self._log(
                "db.restore_failed",
                "error",
                path=self.path,
                what=what,
                error=str(e),
                hint="stop chronod cleanly to keep what it holds, or copy the database back by hand",
            )
            self._counter.labels("failed").inc()
            if self._held is None:
                self._hold()
            return
        self._hold()
        self._counter.labels(what).inc()
        self._log(
            "db.restored",
            "error",
            path=self.path,
            what=what,
            moved_aside=",".join(map(str, aside)) or None,
            why=f"the database file was {what} under the running daemon; it was copied back from the file "
            "chronod still held open, nothing it had written is lost",
        )

    def _put_aside(self, stamp: str) -> list[Path]:
        assert self.path is not None
        moved = []
        for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
            if p.exists():
                dest = p.with_name(f"{p.name}.replaced-{stamp}")
                p.rename(dest)
                moved.append(dest)
        return moved

    def _hold(self) -> None:
        """Open our own connection and find the descriptor it holds on the database file
        (the one that appeared with it: other connections may still hold an older file)."""
        assert self.path is not None
        before = _fds_on(self.path)
        self._held = sqlite3.connect(f"file:{self.path}?mode=rw", uri=True, check_same_thread=False)
        self._held.execute("PRAGMA busy_timeout=5000")
        self._held.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file now
        mine = sorted(_fds_on(self.path) - before)
        self._held_fd = mine[0] if mine else None

    def _release(self) -> None:
        if self._held is not None:
            try:
                self._held.close()
            except sqlite3.Error:
                pass
            self._held = None
            self._held_fd = None

    def close(self) -> None:
        self._release()


def _fds_on(path: Path) -> set[int]:
    """This process's descriptors open on the file at `path` (/proc/self/fd)."""
    fd_dir = Path("/proc/self/fd")
    target = str(path)
    found: set[int] = set()
    try:
        entries = os.listdir(fd_dir)
    except OSError:
        return found
    for name in entries:
        try:
            if os.readlink(fd_dir / name) == target:
                found.add(int(name))
        except (OSError, ValueError):
            continue
    return found


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
