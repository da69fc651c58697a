"""Small host facts and durable file operations shared by chronod and chronoctl."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(
    target: Path, data: bytes, *, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> os.stat_result:
    """Replace `target` with `data`: a temporary dotfile in the same directory (cron and
    chronod skip dotfiles), fsync, mode and owner set (owner only when we are root),
    rename, fsync of the directory. Returns the new file's status."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if owner is not None and os.geteuid() == 0:
                os.fchown(f.fileno(), *owner)
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.rename(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    return os.stat(target)


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_durably(path: Path, *, missing_ok: bool = False) -> None:
    """Unlink `path` and fsync its directory."""
    path.unlink(missing_ok=missing_ok)
    fsync_dir(path.parent)


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (EPERM means it does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_start(pid: int) -> int | None:
    """When the process `pid` started, in clock ticks since boot (`/proc/PID/stat`, field
    22): with the pid and the boot id, the identity of one process, which a pid alone is
    not (the kernel reuses pids). None when there is no such process, or only its zombie
    (a process that ended and that its parent has not reaped yet is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the name in parentheses may hold spaces
    if len(fields) < 20 or fields[0] in ("Z", "X", "x"):
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def same_process(pid: int, started: int | None) -> bool:
    """Whether the process that was `pid`, started at `started` (`process_start`) on this
    boot, still runs: a zombie is dead, and a pid the kernel gave to another process since
    is not the old one. Without a recorded start (rows written before it was kept), a live
    process on that pid is taken for it."""
    now_started = process_start(pid)
    if now_started is None:
        return pid_alive(pid) and not Path("/proc/self/stat").exists()  # no /proc: trust the pid
    return started is None or now_started == started


def boot_id() -> str:
    """The kernel's boot id: changes on every boot, the same for every process of one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"
