"""The state directory shared by supervisors and daemons: one `started` and one `result`
file per attempt, always written atomically (temporary file, fsync, rename).

    <state_dir>/<run_id>.<attempt>.started.json   written by a per-run supervisor once the job runs
    <state_dir>/<run_id>.<attempt>.result.json    written by the supervisor when it is done
    <state_dir>/launched/<pid>.<ticks>.<n>.jsonl  the launcher's `started` records, one file a turn

A `started` file names the supervisor by pid, its start time in clock ticks since boot
(field 22 of /proc/<pid>/stat) and the boot id, so that a recycled pid, or a pid from
before a reboot, is never mistaken for a live supervisor.
"""

from __future__ import annotations

import errno
import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from chronod.paths import live_output
from chronod.runner.api import Outcome

STARTED = "started"
RESULT = "result"
_NAME = re.compile(r"^(?P<run_id>[A-Za-z0-9_-][A-Za-z0-9._-]*)\.(?P<attempt>\d+)\.(?P<kind>started|result)\.json$")
_RUN_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")


def check_run_id(run_id: str) -> None:
    """Refuse run ids that cannot safely be part of a file name."""
    if not _RUN_ID.match(run_id):
        raise ValueError(f"run id {run_id!r} cannot name a state file: use letters, digits, '.', '_', '-'")


def path_of(state_dir: str | Path, run_id: str, attempt: int, kind: str) -> str:
    """The path of the `started` or `result` file of one attempt."""
    return os.path.join(state_dir, f"{run_id}.{attempt}.{kind}.json")


def write_atomic(path: str, data: bytes, durable: bool) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one.

    `durable` also fsyncs the file and its directory: a result must survive a power cut
    that follows it, a `started` file is worthless after a reboot anyway.
    """
    tmp = f"{path}.tmp"
    fd = open_new(tmp)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    if durable:
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def open_new(path: str, flags: int = 0) -> int:
    """A new file at `path`, mode 0600, created here and now: never a file or link found
    in its place (one is removed first; the directory is the daemon's own, 0700)."""
    try:
        return os.open(path, NEW_FILE | flags, 0o600)
    except FileExistsError:
        os.unlink(path)  # a leftover of a crash, or a planted link: unlink never follows it
        return os.open(path, NEW_FILE | flags, 0o600)


def write_json(path: str, record: dict[str, Any], durable: bool) -> None:
    """`write_atomic` of a JSON object."""
    write_atomic(path, json.dumps(record, sort_keys=True).encode(), durable)


LAUNCHED = "launched"


def launched_name(pid: int, ticks: int | None, seq: int) -> str:
    """The name, in `<state_dir>/launched/`, of one turn's `started` records of the
    launcher `pid` (started at `ticks`)."""
    return f"{pid}.{ticks}.{seq}.jsonl"


def open_launched_dir(state_dir: str | Path, create: bool = False) -> int | None:
    """The directory of the launchers' `started` records, open (never through a link);
    None when there is none."""
    path = os.path.join(state_dir, LAUNCHED)
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None
        raise


def write_launched(dir_fd: int, name: str, records: list[dict[str, Any]]) -> None:
    """The `started` records of a turn of launches, one JSON line each, in one new file
    (one file per turn, not per run: on a file system that churns through files, such as
    ext4 during a burst, finding a free inode for each new file was most of the cost of
    a start). Written under the start gate (chronod.runner.fence), so a daemon that took
    the state directory over reads it whole; a line cut short by a kill of its writer
    reads as no record, as if the writer had been killed a moment earlier."""
    data = b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in records)
    try:
        fd = os.open(name, NEW_FILE, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        os.unlink(name, dir_fd=dir_fd)
        fd = os.open(name, NEW_FILE, 0o600, dir_fd=dir_fd)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd` (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_started(state_dir: str | Path, run_id: str, attempt: int) -> dict[str, Any] | None:
    """The `started` record of an attempt: its own file (written by a per-run
    supervisor), else the newest line for it among the launchers' records; None when
    there is none."""
    try:
        own = read_json(path_of(state_dir, run_id, attempt, STARTED))
    except ValueError:  # cut short: nothing is known of the start
        own = None
    if own is not None:
        return own
    dir_fd = open_launched_dir(state_dir)
    if dir_fd is None:
        return None
    want = f'"run_id": {json.dumps(run_id)}'.encode()
    found: tuple[int, str, dict[str, Any]] | None = None
    try:
        for name in os.listdir(dir_fd):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except OSError:
                continue  # removed meanwhile, or not a file of ours
            with open(fd, "rb") as f:
                when, data = os.fstat(f.fileno()).st_mtime_ns, f.read()
            for line in data.splitlines():
                if want not in line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # cut short
                if record.get("run_id") == run_id and record.get("attempt") == attempt:
                    if found is None or (when, name) >= found[:2]:
                        found = (when, name, record)  # the newest wins: an earlier life of the attempt
    finally:
        os.close(dir_fd)
    return found[2] if found else None


def remove_launched_of_gone(state_dir: str | Path) -> None:
    """Remove the `started` records of launchers that are gone: once every run left
    running was adopted or settled, nothing reads them again (a live launcher removes its
    own as its runs are recorded, and the rest when it exits)."""
    dir_fd = open_launched_dir(state_dir)
    if dir_fd is None:
        return
    try:
        for name in os.listdir(dir_fd):
            pid, _, rest = name.partition(".")
            ticks = rest.partition(".")[0]
            if pid.isdigit() and str(proc_start_ticks(pid)) == ticks:
                continue  # its launcher is alive
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
    finally:
        os.close(dir_fd)


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link is never ours: as good as no file
            return None
        raise
    with open(fd, "rb") as f:
        data: dict[str, Any] = json.loads(f.read())
        return data


LIVE_MIN_BYTES = 1 << 20


def live_path(state_dir: str | Path, run_id: str, attempt: int) -> str:
    """The live output file of an attempt (chronod.paths names it for chronoctl too)."""
    return str(live_output(state_dir, run_id, attempt))


def live_limit(tail_bytes: int) -> int:
    """How far a live output file grows: 16 times the stored tail, at least 1 MiB."""
    return max(LIVE_MIN_BYTES, 16 * tail_bytes)


def remove(state_dir: str | Path, run_id: str, attempt: int) -> None:
    """Remove the files of an attempt (and a leftover temporary file), if present."""
    try:
        os.unlink(live_path(state_dir, run_id, attempt))
    except FileNotFoundError:
        pass
    for kind in (STARTED, RESULT):
        base = path_of(state_dir, run_id, attempt, kind)
        for path in (base, base + ".tmp"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def attempts_in(state_dir: str | Path) -> list[tuple[str, int]]:
    """Every (run_id, attempt) that has a `started` or `result` file, sorted."""
    found: set[tuple[str, int]] = set()
    for name in os.listdir(state_dir):
        m = _NAME.match(name)
        if m:
            found.add((m["run_id"], int(m["attempt"])))
    return sorted(found)


def boot_id() -> str:
    """This boot's id (changes on every reboot)."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def proc_start_ticks(pid: int | str) -> int | None:
    """When process `pid` started, in clock ticks since boot; None if it does not exist."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        stat = os.read(fd, 4096)  # one read: the kernel makes the whole line at once
    except ProcessLookupError:
        return None
    finally:
        os.close(fd)
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[19])


def outcome_to_json(o: Outcome) -> dict[str, Any]:
    """A JSON-ready dict of an Outcome (datetimes as ISO-8601 strings)."""
    return {
        "run_id": o.run_id,
        "attempt": o.attempt,
        "state": o.state,
        "exit_code": o.exit_code,
        "signal": o.signal,
        "started_at": o.started_at.isoformat() if o.started_at else None,
        "finished_at": o.finished_at.isoformat() if o.finished_at else None,
        "output_tail": o.output_tail,
        "output_bytes": o.output_bytes,
        "error": o.error,
        "pid": o.pid,
    }


def outcome_from_json(d: dict[str, Any]) -> Outcome:
    """Rebuild an Outcome written by `outcome_to_json`."""
    return Outcome(
        run_id=d["run_id"],
        attempt=int(d["attempt"]),
        state=d["state"],
        exit_code=d.get("exit_code"),
        signal=d.get("signal"),
        started_at=_when(d.get("started_at")),
        finished_at=_when(d.get("finished_at")),
        output_tail=d.get("output_tail") or "",
        output_bytes=int(d.get("output_bytes") or 0),
        error=d.get("error"),
        pid=d.get("pid"),
    )


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None
