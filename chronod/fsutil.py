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


def boot_id() -> str:
    """The kernel's boot id: changes on every boot, the same for every process of one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"
