"""Containment: which processes belong to one run, and how to end every one of them.

A job may start background processes that leave its process group and session
(`setsid`, a double fork): a signal to the group misses them. So every run gets a place
that its descendants cannot leave:

- **cgroup v2** (the normal case): each run in a cgroup of its own,
  `<base>/<run_id>.<attempt>`, under a subtree chronod creates in its own cgroup (under
  systemd, the unit's delegated subtree: `Delegate=yes`). The job's process enters it
  between fork and exec, so everything it starts is in it. Stopping a run signals every
  process in it; killing it writes `cgroup.kill` (or SIGKILLs every pid in
  `cgroup.procs` on kernels without it, until none is left).
- **subreaper** (no writable cgroup v2): the launcher (or per-run supervisor) is a child
  subreaper (`PR_SET_CHILD_SUBREAPER`), so the orphans of its jobs become its children and
  are reaped by it; a run's processes are found by the `CHRONO_RUN_TAG` of their
  environment (`tag_of`), which every descendant inherits unless it clears its
  environment.

`detect` decides once per daemon; its `describe()` is what `chronoctl status` shows.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP = "cgroup"
SUBREAPER = "subreaper"
PR_SET_CHILD_SUBREAPER = 36
KILL_WAIT_S = 5.0  # how long `kill` waits for a run's last process to be gone


@dataclass(frozen=True)
class Containment:
    """How runs are contained: `kind` CGROUP with `base` the directory holding one cgroup
    per run, or SUBREAPER with `why` no cgroup could be used."""

    kind: str
    base: str | None = None
    why: str = ""

    def describe(self) -> str:
        if self.kind == CGROUP:
            return f"cgroup v2 ({self.base})"
        return f"subreaper ({self.why})" if self.why else "subreaper"

    def run_cgroup(self, run_id: str, attempt: int) -> str | None:
        """The cgroup directory of one attempt (None without cgroups)."""
        if self.kind != CGROUP or self.base is None:
            return None
        return os.path.join(self.base, f"{run_id}.{attempt}")


def subreaper_only(why: str) -> Containment:
    return Containment(SUBREAPER, None, why)


def detect(state_dir: str | os.PathLike[str], *, mountinfo: str = "/proc/self/mountinfo") -> Containment:
    """cgroup v2 when this process's own cgroup (v2) is writable, else the subreaper
    fallback with the reason. The subtree is named after the state directory, so a later
    daemon on the same state directory finds the cgroups of the runs it adopts."""
    mount = _cgroup2_mount(mountinfo)
    if mount is None:
        return subreaper_only("no cgroup v2 file system is mounted")
    own = _own_cgroup()
    if own is None:
        return subreaper_only("this process has no cgroup v2 path in /proc/self/cgroup")
    base = os.path.join(mount, own.lstrip("/"), subtree_name(state_dir))
    try:
        os.makedirs(base, exist_ok=True)
    except OSError as e:
        return subreaper_only(f"cannot create {base}: {e.strerror} (under systemd the unit needs Delegate=yes)")
    if not (os.access(os.path.join(base, "cgroup.procs"), os.W_OK) and _subtree_free(base)):
        return subreaper_only(f"{base} cannot take processes (no write access, or controllers enabled in it)")
    return Containment(CGROUP, base)


def own_dir(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The directory of this process's own cgroup v2 (None when it cannot be told)."""
    mount, own = _cgroup2_mount(mountinfo), _own_cgroup()
    if mount is None or own is None:
        return None
    return os.path.join(mount, own.lstrip("/"))


def _cgroup2_mount(mountinfo: str) -> str | None:
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        head, _, tail = line.partition(" - ")
        if tail.split(" ", 1)[0] == "cgroup2":
            fields = head.split()
            if len(fields) > 4 and fields[3] == "/":
                return fields[4].replace("\\040", " ")
    return None


def _own_cgroup() -> str | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:].removesuffix(" (deleted)")
    except OSError:
        pass
    return None


def _subtree_free(base: str) -> bool:
    try:
        return Path(base, "cgroup.subtree_control").read_text().strip() == ""
    except OSError:
        return False


# ------------------------------------------------------------------- cgroup of one run


def create(path: str) -> None:
    """Make the run's cgroup (an empty one left by an earlier life is reused)."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except FileNotFoundError:  # the runs' subtree went meanwhile
        os.makedirs(path, 0o755, exist_ok=True)


def enter(path: str) -> None:
    """Move the calling process (every thread of it) into `path`: a job's forked child
    before exec, or the launcher for the instant of a spawn (chronod.runner.launchloop)."""
    fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)


def pids(path: str) -> list[int]:
    """Every process in the cgroup (empty when it is gone)."""
    try:
        return [int(p) for p in Path(path, "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def populated(path: str) -> bool:
    try:
        for line in Path(path, "cgroup.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "populated":
                return value.strip() == "1"
    except OSError:
        return False
    return False


def signal_all(path: str, sig: int) -> int:
    """Send `sig` to every process of the cgroup; how many there were."""
    return _send(pids(path), sig)


def _send(found: list[int], sig: int) -> int:
    """Send `sig` to each of `found` (one that already left is no error); how many."""
    for pid in found:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    return len(found)


def kill(path: str, wait_s: float = KILL_WAIT_S) -> bool:
    """SIGKILL every process of the cgroup, including those that left the job's session;
    wait (up to `wait_s`) until none is left. True if there was any."""
    if not os.path.isdir(path):
        return False
    had = populated(path)
    try:
        Path(path, "cgroup.kill").write_text("1")
    except OSError:
        _kill_by_list(path)
    end = time.monotonic() + wait_s
    while populated(path) and time.monotonic() < end:
        _kill_by_list(path)  # a kernel without cgroup.kill, or a fork that raced the kill
        time.sleep(0.005)
    return had


def _kill_by_list(path: str) -> None:
    for _ in range(100):  # a fork bomb forks while we kill: go on until the list is empty
        if signal_all(path, signal.SIGKILL) == 0:
            return


def remove(path: str | None) -> bool:
    """Remove the run's cgroup once nothing is left in it; False while it is busy (a
    background process of a job that ended normally lives on: removed later)."""
    if path is None:
        return True
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError as e:
        if e.errno in (errno.EBUSY, errno.ENOTEMPTY):
            return False
        return False
    return True


def sweep(base: str | None, keep: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Remove the empty cgroups of ended runs under `base` (not those named in `keep`)."""
    if base is None:
        return
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        path = os.path.join(base, name)
        if name in keep or not os.path.isdir(path) or populated(path):
            continue
        remove(path)


# ----------------------------------------------------------------------- the fallback


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans; False where it cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


TAG = "CHRONO_RUN_TAG"


def tag_of(state_dir: str | os.PathLike[str], run_id: str, attempt: int) -> str:
    """What every process of one attempt carries in its environment as CHRONO_RUN_TAG:
    the state directory (two daemons on one host may have runs with the same id: the id
    is a hash of the job and its time), the run id and the attempt."""
    return f"{_dir_tag(state_dir)}.{run_id}.{attempt}"


def subtree_name(state_dir: str | os.PathLike[str]) -> str:
    """The name of the cgroup subtree that holds the runs of the daemon on `state_dir`."""
    return f"chrono-runs.{_dir_tag(state_dir)}"


def _dir_tag(state_dir: str | os.PathLike[str]) -> str:
    path = os.fspath(state_dir)
    return _abs_dir_tag(path if os.path.isabs(path) else str(Path(path).absolute()))


@functools.lru_cache(maxsize=64)  # asked at every launch, for the daemon's one state directory
def _abs_dir_tag(path: str) -> str:
    return hashlib.sha256(str(Path(path).absolute()).encode()).hexdigest()[:12]


def tagged(tag: str) -> list[int]:
    """Every process whose environment carries CHRONO_RUN_TAG=`tag` (inherited by each
    descendant of the job that keeps its environment)."""
    if not tag:
        return []
    want = f"{TAG}={tag}".encode()
    me = os.getpid()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if want in env:
            found.append(int(name))
    return found


def signal_tagged(tag: str, sig: int) -> int:
    return _send(tagged(tag), sig)


def kill_tagged(tag: str, wait_s: float = KILL_WAIT_S) -> bool:
    """SIGKILL every process of the attempt found by its environment, until none is left
    (a process that cleared its environment escapes: the cgroup does not let it)."""
    had = False
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        found = [p for p in tagged(tag) if not _zombie(p)]
        if not found:
            return had
        had = True
        _send(found, signal.SIGKILL)
        time.sleep(0.005)
    return had


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2 :].startswith(("Z", "X"))


# ---------------------------------------------------------------- one run, either kind


def stop_run(cgroup: str | None, tag: str, pgid: int, sig: int) -> None:
    """`sig` to the job's process group and to every other process of the run."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    if cgroup is not None:
        if sig == signal.SIGKILL:
            kill(cgroup, wait_s=0)
        else:
            signal_all(cgroup, sig)
    else:
        signal_tagged(tag, sig)


def kill_run(cgroup: str | None, tag: str, wait_s: float = KILL_WAIT_S) -> bool:
    """SIGKILL every process of the run and wait until none is left; True if any was."""
    if cgroup is not None and os.path.isdir(cgroup):
        return kill(cgroup, wait_s)
    return kill_tagged(tag, wait_s)
