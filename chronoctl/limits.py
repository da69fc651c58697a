"""Bounded reads of what `chronoctl import` is given: crontabs, timers and their services,
drop-ins, EnvironmentFile=s, anacrontabs and standard input. Each is read up to a limit and
refused past it, so a wrong path (`/dev/zero`, a log file) costs a second, not the memory of
the host. The limit is the job files' own (1 MiB): no scheduler's file is near it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from chronoctl.errors import UsageError
from chronod.specfile import MAX_FILE_BYTES

LIMIT = MAX_FILE_BYTES

# Files read here that others may not read (a 0600 EnvironmentFile=, a user's spool
# crontab): what `import` makes of them is written readable by root alone (`read_privately`).
_PRIVATE: set[str] = set()


def read_privately() -> bool:
    """Whether any file read here since `forget_reads` is one that others may not read."""
    return bool(_PRIVATE)


def forget_reads() -> None:
    """Start counting the files `read_privately` tells of anew (one import command)."""
    _PRIVATE.clear()


def _too_large(what: str) -> UsageError:
    return UsageError(
        f"{what} is larger than {LIMIT // 1024} KiB: it is not a crontab, timer or anacrontab "
        f"(chronoctl import reads at most {LIMIT} bytes of each file)",
        "check the path; split a crontab this large into several files",
    )


def read_stream(stream: BinaryIO, what: str) -> bytes:
    """At most LIMIT bytes of an open stream; UsageError when there are more."""
    data = stream.read(LIMIT + 1)
    if len(data) > LIMIT:
        raise _too_large(what)
    return data


def read_bounded_bytes(path: Path, what: str) -> bytes:
    """A file's bytes, at most LIMIT of them. Only regular files, FIFOs and character devices
    are opened (a directory or a socket is refused); FileNotFoundError passes through."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UsageError(f"cannot read {what}: {exc.strerror}", "check the path and its permissions") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{what} is a directory", "give a file")
    if stat.S_ISREG(st.st_mode) and st.st_size > LIMIT:
        raise _too_large(what)
    if not st.st_mode & stat.S_IROTH:
        _PRIVATE.add(str(path))
    try:
        with open(path, "rb") as fh:
            return read_stream(fh, what)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UsageError(f"cannot read {what}: {exc.strerror}", "check the path and its permissions") from None


def read_bounded(path: Path, what: str) -> str:
    """read_bounded_bytes as text (bytes that are not UTF-8 kept as surrogate escapes)."""
    return read_bounded_bytes(path, what).decode("utf-8", errors="surrogateescape")
