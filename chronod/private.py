"""The ledger is private (docs/reference.md, Security model).

The SQLite database holds every job's command, `env:` and output; the state directory
holds result and live output files. Both are created readable by their owner alone
(files 0600, directories 0700), and a daemon refuses to start on a database or state
directory that another user controls: whoever controls the directory can plant links
that the daemon would follow, or read and rewrite the history.

A database file created earlier with a wider mode is narrowed to 0600 (group read is
kept when the operator chose a group, e.g. `chgrp chrono chrono.db; chmod 0640`), and so
are its `-wal` and `-shm` files, which SQLite creates with the database's own mode.

Neither the database nor its side files are ever followed as links, and the directory
that holds them (or the state directory) must not be another user's to change: its owner
could delete the history, or plant `chrono.db-journal -> /etc/passwd` and have a root
daemon narrow /etc/passwd to 0600. A sticky directory such as /tmp is accepted: there
nobody else may rename or remove our files, and what they plant is refused by name.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from pathlib import Path

SIDE_FILES = ("-wal", "-shm", "-journal")


class NotPrivate(Exception):
    """A database or state directory another user controls, said for an operator."""


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def create_db_file(path: Path) -> None:
    """Create an empty SQLite database file readable by its owner alone, unless one exists
    (SQLite then gives its `-wal` and `-shm` files the same mode)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    except OSError:
        return  # SQLite says why it cannot open it, in its own words
    os.close(fd)


def secure_db_file(path: Path) -> None:
    """Refuse a database (or one of its side files) owned by another user; narrow the
    mode of ours to 0600 (0640 when its group is not our own). A daemon calls this before
    it opens the database."""
    me = os.geteuid()
    _check_parent(path, "database")
    for name in ("", *SIDE_FILES):
        f = Path(f"{path}{name}")
        try:
            st = os.lstat(f)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise NotPrivate(f"database file {f} cannot be examined ({e.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise NotPrivate(
                f"database file {f} is a symbolic link: chronod neither follows nor changes it (whoever "
                f"planted it would choose the file a root daemon writes); remove it, or pass --db with "
                f"the real path of the database"
            )
        if st.st_uid != me:
            raise NotPrivate(
                f"database file {f} belongs to {_who(st.st_uid)}, not to {_who(me)} who runs chronod: "
                f"whoever owns it can read every job's output and env and rewrite its history; "
                f"move it away or keep the database in a directory only {_who(me)} can write "
                f"(the default /var/lib/chrono), or pass --db PATH"
            )
        if stat.S_ISREG(st.st_mode):  # SQLite says why it cannot open a directory or a device
            _narrow(f, st)


def _narrow(f: Path, st: os.stat_result) -> None:
    """Narrow the database file `f` (examined as `st`) to 0600, 0640 when its group is not
    our own, through a descriptor of that very file: never through a link put in its place."""
    wide = stat.S_IMODE(st.st_mode)
    keep = 0o640 if st.st_gid != os.getegid() else 0o600
    if not wide & ~keep:
        return
    try:
        fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise NotPrivate(f"database file {f} cannot be examined ({e.strerror})") from None
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise NotPrivate(f"database file {f} was replaced while chronod examined it: start chronod again")
        os.fchmod(fd, wide & keep)
    finally:
        os.close(fd)


def _check_parent(path: Path, what: str) -> None:
    """Refuse a database or state directory whose directory another user may change: owned
    by someone other than root or us, or writable by its group or by everyone without the
    sticky bit (in a sticky directory such as /tmp, nobody else may rename or remove our
    files). Its owner could remove the history, or put links in place of our files."""
    me = os.geteuid()
    parent = path.absolute().parent
    try:
        st = os.stat(parent)
    except FileNotFoundError:
        return  # made by us, 0700, when the database or the state directory is created
    except OSError as e:
        raise NotPrivate(f"the directory {parent} of the {what} cannot be examined ({e.strerror})") from None
    if st.st_uid not in (0, me):
        raise NotPrivate(
            f"the {what} {path} is in {parent}, which belongs to {_who(st.st_uid)}: its owner could remove "
            f"chronod's files or put links in their place; keep the {what} in a directory only {_who(me)} "
            f"can change (the default /var/lib/chrono)"
        )
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise NotPrivate(
            f"the {what} {path} is in {parent}, which its group or everyone may write (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): they could remove chronod's files or put links in their place; "
            f"chmod go-w {parent}, or keep the {what} in a directory only {_who(me)} can change"
        )


def own_directory(path: Path, what: str = "state directory") -> None:
    """Create `path` 0700 if it is missing, then insist that it is a real directory (not a
    link) owned by this process's user and writable by no one else; group and world
    read access is removed. Raises NotPrivate with what to do."""
    me = os.geteuid()
    _check_parent(path, what)
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as e:
        raise NotPrivate(
            f"{what} {path} cannot be created ({e.strerror}): pass --state-dir DIR or fix its parent's permissions"
        ) from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotPrivate(
                f"{what} {path} is a symbolic link or not a directory: chronod keeps its files only in a "
                f"directory it owns; remove {path} or pass --state-dir DIR"
            ) from None
        raise NotPrivate(f"{what} {path} cannot be opened ({e.strerror}): pass --state-dir DIR") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != me:
            raise NotPrivate(
                f"{what} {path} belongs to {_who(st.st_uid)}, not to {_who(me)} who runs chronod: its owner "
                f"could plant links there that chronod would write through; remove it "
                f"(rm -r {path}) so chronod creates its own, or pass --state-dir DIR"
            )
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o022:
            raise NotPrivate(
                f"{what} {path} is writable by its group or by everyone (mode {mode:04o}): chmod 0700 {path}, "
                f"or pass --state-dir DIR"
            )
        if mode & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
