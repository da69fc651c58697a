"""The daemon's side of the runner: start attempts, watch them, collect their result
files, cancel them, and adopt the ones a previous daemon left running.

With `many=True` (the daemon) every attempt goes to the launcher for many runs
(chronod.runner.launcher, docs/launcher.md): one long-lived process that starts and
supervises them all, and hands back per run a pipe that becomes readable when the
result is on disk. Without it, or when the launcher cannot be started, each attempt gets
a supervisor process of its own, forked by a small helper process (`zygote=True`,
chronod.runner.zygote: much cheaper forks) or by the daemon itself, and watched by pidfd.

A daemon killed with -9 loses nothing: supervisors are not its process group, they keep
their jobs running and write their results; the next daemon `adopt`s each attempt it
had recorded as running, and `orphans` lists the files nobody claims.

Watch many handles with `select.poll` or `selectors.DefaultSelector` (or `ready()`),
never `select.select`: a daemon with 1,000 running jobs has descriptors above 1024.
"""

from __future__ import annotations

import gc
import grp
import os
import pwd
import resource
import select
import signal
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from chronod.core.clock import Clock
from chronod.core.model import JobSpec, RunState
from chronod.runner import contain, fence, files, launcher, supervisor
from chronod.runner.api import Handle, LaunchRequest, Outcome
from chronod.runner.launcher import Launcher, LauncherError
from chronod.runner.supervisor import Credentials, Plan
from chronod.runner.zygote import Zygote, ZygoteError

LOST_ERROR = "supervisor died; outcome unknown"
USER_PATH = "/usr/local/bin:/usr/bin:/bin"
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_BLOCKED_AROUND_FORK = {supervisor.CANCEL_SIGNAL, *supervisor.IGNORED_SIGNALS}
MAX_LAUNCHERS = 2  # measured on 2 CPUs (bench/README.md, "A burst of 1,000 starts: two launchers")
IDENTITY_TTL_S = 1.0  # a user or group looked up once serves the launches of this long


def launchers() -> int:
    """How many launchers a daemon keeps: one per CPU it may run on, at most MAX_LAUNCHERS.
    A spawn waits for its child's exec; with one launcher a burst's spawns wait one after
    another, with two they overlap."""
    return max(1, min(MAX_LAUNCHERS, len(os.sched_getaffinity(0))))


class Runner:
    """Launches attempts under supervisors that write into `state_dir`."""

    def __init__(
        self,
        state_dir: Path,
        clock: Clock | None = None,
        *,
        zygote: bool = False,
        many: bool = False,
        launchers: int = 1,
        containment: contain.Containment | None = None,
    ):
        self.state_dir = Path(state_dir).absolute()  # the launcher and supervisors change directory
        # every run in a cgroup of its own, or the subreaper fallback (chronod.runner.contain)
        self.containment = containment or contain.detect(self.state_dir)
        self.generation = 0  # this daemon's, once `fence` made it the owner of the state directory
        self._use_zygote = zygote
        self._zygote: Zygote | None = None
        self._use_launcher = many
        # the launchers for many runs, given runs in turn: each waits for its spawns' execs,
        # two overlap those waits on two CPUs (docs/launcher.md, "Two launchers")
        self._launchers: list[Launcher | None] = [None] * max(launchers, 1)
        self._turn = 0
        # (run_id, attempt) -> (pid, start ticks) of the launcher that runs it, until `discard`
        self._owners: dict[tuple[str, int], tuple[int, int]] = {}
        self._stalled: set[tuple[int, int]] = set()  # launchers that did not answer a watch
        self._gone: list[int] = []  # launchers that died, reaped once they are zombies
        if many:
            for i in range(len(self._launchers)):
                try:
                    self._launchers[i] = Launcher()
                except OSError:
                    pass  # the first launch tries again, then falls back to a supervisor per run
        if zygote and not many:
            # now, not at the first launch: its interpreter takes a good 100 ms to start
            try:
                self._zygote = Zygote()
            except OSError:
                pass  # the first launch tries again, then forks by itself
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._clock = clock or Clock()
        self._nofile = raise_fd_limit()
        self._handles: dict[tuple[str, int], Handle] = {}
        # (user, group) -> (monotonic time looked up, resolve_identity's answer): a burst of
        # 1,000 launches read the password and group files 1,000 times
        self._identities: dict[tuple[str | None, str | None], tuple[float, tuple[Any, ...]]] = {}

    # -- launching --------------------------------------------------------------------

    def launch(self, req: LaunchRequest) -> Handle:
        """Start one attempt under a new supervisor and return at once.

        A job that cannot start (unknown user, missing command, bad workdir) still gets a
        supervisor, which records `failed` with the reason: `collect` reports it like any
        other end. `Handle.pid` is filled in later by `refresh` or by the Outcome.
        """
        files.check_run_id(req.run_id)
        key = (req.run_id, req.attempt)
        if key in self._handles:
            raise ValueError(f"run {req.run_id} attempt {req.attempt} is already running under this runner")
        plan = self._plan(req)
        if not self._live():
            files.remove(self.state_dir, req.run_id, req.attempt)  # the launcher does it itself
        pid, fd = self._start(plan)
        handle = Handle(req.run_id, req.attempt, pid, None, self._clock.now(), fd)
        self._handles[key] = handle
        return handle

    def _start(self, plan: Plan) -> tuple[int, int]:
        """(supervisor pid, a descriptor readable at the end): through the launcher for
        many runs when enabled and alive, else through the zygote, else a fork."""
        if self._use_launcher:
            self._turn = (self._turn + 1) % len(self._launchers)
            for k in range(2):  # a dead launcher is replaced once per launch; the next one is tried after
                i = (self._turn + k) % len(self._launchers)
                current = self._launchers[i]
                try:
                    if current is None or not current.alive:
                        current = self._launchers[i] = Launcher()
                    pid, fd = current.launch(plan)
                except (LauncherError, OSError):
                    if current is not None:
                        self._gone.append(current.pid)
                    self._launchers[i] = None
                    continue
                self._gone = [p for p in self._gone if not _reap(p)]
                self._owners[(plan.run_id, plan.attempt)] = (pid, current.ticks)
                return pid, fd
        if self._use_zygote:
            try:
                if self._zygote is None:
                    self._zygote = Zygote()
                return self._zygote.fork(plan)
            except (ZygoteError, OSError):
                self._zygote = None  # a new one is spawned on the next launch
        pid = _fork_supervisor(plan)
        return pid, os.pidfd_open(pid)

    def _plan(self, req: LaunchRequest) -> Plan:
        spec = req.spec
        creds, account, error = self._identity(spec.user, spec.group)
        argv, what = command_argv(spec)
        env = job_environment(account, spec, req.env)
        env[contain.TAG] = contain.tag_of(self.state_dir, req.run_id, req.attempt)  # the fallback's handle on the run
        return Plan(
            run_id=req.run_id,
            attempt=req.attempt,
            argv=argv,
            what=what,
            env=env,
            workdir=spec.workdir,
            stdin=spec.stdin.encode() if spec.stdin is not None else None,
            creds=creds,
            timeout_s=spec.timeout_s,
            kill_grace_s=spec.kill_grace_s,
            limit_bytes=spec.output_limit_kb * 1024,
            nofile=self._nofile,
            state_dir=str(self.state_dir),
            error=error,
            cgroup=self.containment.run_cgroup(req.run_id, req.attempt),
            generation=self.generation,
        )

    def _identity(self, user: str | None, group: str | None) -> tuple[Any, ...]:
        """`resolve_identity`, kept for IDENTITY_TTL_S (a changed account applies from the
        next second on; an unknown one is looked up at every launch)."""
        now = time.monotonic()
        hit = self._identities.get((user, group))
        if hit is not None and now - hit[0] < IDENTITY_TTL_S:
            return hit[1]
        if len(self._identities) > 10_000:
            self._identities.clear()
        got = resolve_identity(user, group)
        if got[2] is None:  # an unknown account is looked up again at the next launch
            self._identities[(user, group)] = (now, got)
        return got

    # -- watching ---------------------------------------------------------------------

    def handles(self) -> list[Handle]:
        """Every launched or adopted attempt not collected yet."""
        return list(self._handles.values())

    def ready(self, timeout_s: float = 0) -> list[Handle]:
        """The handles whose supervisor has exited, waiting up to `timeout_s` for one."""
        if not self._handles:
            return []
        poller = select.poll()
        by_fd = {h.fd: h for h in self._handles.values()}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        return [by_fd[fd] for fd, _ in poller.poll(max(0, int(timeout_s * 1000)))]

    def refresh(self, handle: Handle) -> bool:
        """Fill `handle.pid` and `handle.started_at` from the started file; False if not there yet."""
        record = files.read_started(self.state_dir, handle.run_id, handle.attempt)
        if record is None:
            return False
        handle.pid = record["pid"]
        handle.started_at = datetime.fromisoformat(record["started_at"])
        return True

    def cancel(self, handle: Handle) -> None:
        """Ask the supervisor to stop the job: SIGTERM to its group, SIGKILL after the grace.

        The attempt then ends as `cancelled`; `collect` it as usual.
        """
        owner = self._owners.get((handle.run_id, handle.attempt))
        if owner is not None:
            current = self._launcher_of(owner)
            if current is not None:
                current.cancel(handle.run_id, handle.attempt)
            else:
                launcher.cancel(*owner, handle.run_id, handle.attempt)
            return
        try:
            signal.pidfd_send_signal(handle.fd, supervisor.CANCEL_SIGNAL)
        except ProcessLookupError:
            pass  # already finished: its result stands

    def collect(self, handle: Handle) -> Outcome | None:
        """How the attempt ended, once its supervisor has exited (None while it runs).

        Reads the attempt's files and closes the handle; the files stay until the daemon has
        stored the outcome and calls `discard` (a crash in between loses nothing). A supervisor that died
        without a result (killed -9) gives state `lost`; its job, if still running, is killed
        so that a re-dispatch never runs beside it.
        """
        if not _exited(handle.fd):
            return None
        if (handle.run_id, handle.attempt) not in self._owners:
            _reap(handle.supervisor_pid)
        record = files.read_json(self._path(handle.run_id, handle.attempt, files.RESULT))
        outcome = files.outcome_from_json(record) if record else self._lost(handle)
        self._forget(handle)
        return outcome

    def _lost(self, handle: Handle) -> Outcome:
        started = files.read_started(self.state_dir, handle.run_id, handle.attempt) or {}
        pid = started.get("pid") or handle.pid
        error = LOST_ERROR
        if self._kill_leftovers(handle.run_id, handle.attempt, started):
            error += f"; its job (pid {pid}) was still running and has been killed, with every process it started"
        return Outcome(
            handle.run_id,
            handle.attempt,
            RunState.LOST,
            None,
            None,
            handle.started_at,
            self._clock.now(),
            "",
            0,
            error,
            pid,
        )

    def _forget(self, handle: Handle) -> None:
        self._handles.pop((handle.run_id, handle.attempt), None)
        if handle.fd >= 0:
            os.close(handle.fd)
            handle.fd = -1

    # -- after a restart --------------------------------------------------------------

    def adopt(self, run_id: str, attempt: int) -> Handle | Outcome | None:
        """Take over an attempt a previous daemon launched.

        Returns the recorded Outcome if it ended meanwhile (its files stay until `discard`), a new
        Handle if its supervisor is still alive (same pid, same start time, same boot), or
        None if nothing is known: never started, or its supervisor died (killed, or with
        the machine). For None, leftover files are removed and a still-running job killed.
        """
        files.check_run_id(run_id)
        started = files.read_started(self.state_dir, run_id, attempt)
        handle = self._watch_live(run_id, attempt, started) if started else None
        if handle is not None:
            return handle
        record = files.read_json(self._path(run_id, attempt, files.RESULT))
        if record is not None:
            return files.outcome_from_json(record)
        self._kill_leftovers(run_id, attempt, started or {})
        files.remove(self.state_dir, run_id, attempt)
        return None

    def _kill_leftovers(self, run_id: str, attempt: int, started: dict[str, Any]) -> bool:
        """Kill every process left of an attempt whose supervisor is gone (its group, its
        cgroup, or in the fallback every process whose environment names it), and wait
        until none is left: a new attempt never runs beside an old one. True if any was."""
        killed = _kill_leftover_job(started)
        cgroup = started.get("cgroup") or self.containment.run_cgroup(run_id, attempt)
        if started.get("boot_id", files.boot_id()) == files.boot_id():
            killed = contain.kill_run(cgroup, contain.tag_of(self.state_dir, run_id, attempt)) or killed
        contain.remove(cgroup)
        return killed

    # -- the fence ----------------------------------------------------------------------

    def fence(self, generation: int) -> list[int]:
        """Own the state directory as `generation` (the daemon's fencing token), before
        any run is settled: no launcher of an earlier daemon starts anything afterwards
        (chronod.runner.fence). Returns the pids of launchers killed because they were
        stuck in the middle of a start."""
        self.generation = generation
        killed = fence.take_over(str(self.state_dir), generation)
        contain.sweep(self.containment.base)
        return killed

    def _watch_live(self, run_id: str, attempt: int, started: dict[str, Any]) -> Handle | None:
        if started.get("boot_id") != files.boot_id():
            return None
        pid, ticks = started["supervisor_pid"], started["supervisor_start_ticks"]
        if files.proc_start_ticks(pid) != ticks:
            return None
        if started.get("launcher"):
            return self._watch_launched(run_id, attempt, started)
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        # The pid could have been recycled between the check and the open: check again.
        if files.proc_start_ticks(pid) != ticks or _exited(fd):
            os.close(fd)
            return None
        handle = Handle(run_id, attempt, pid, started["pid"], datetime.fromisoformat(started["started_at"]), fd)
        self._handles[(run_id, attempt)] = handle
        return handle

    def _watch_launched(self, run_id: str, attempt: int, started: dict[str, Any]) -> Handle | None:
        """Adopt a run of a launcher that is still up: it hands us an end pipe for it."""
        if os.path.exists(self._path(run_id, attempt, files.RESULT)):
            return None  # ended: the launcher lives on for other runs, `adopt` reads the result
        pid, ticks = started["supervisor_pid"], started["supervisor_start_ticks"]
        fd = launcher.watch(pid, ticks, run_id, attempt, self._stalled)
        if fd is None:
            return None
        handle = Handle(run_id, attempt, pid, started["pid"], datetime.fromisoformat(started["started_at"]), fd)
        self._handles[(run_id, attempt)] = handle
        self._owners[(run_id, attempt)] = (pid, ticks)
        return handle

    def orphans(self, known: Iterable[tuple[str, int]] = ()) -> list[tuple[str, int]]:
        """(run_id, attempt) of state files that neither this runner nor `known` accounts for.
        Asked once every run left running was adopted or settled: the `started` records of
        launchers that are gone are read no more, and go now."""
        files.remove_launched_of_gone(self.state_dir)
        skip = set(self._handles) | set(known)
        return [key for key in files.attempts_in(self.state_dir) if key not in skip]

    def discard(self, run_id: str, attempt: int) -> None:
        """Remove an attempt's state files once the daemon has stored its outcome.

        With a launcher the launcher removes them: a crash before it did leaves orphans
        that the next daemon finds recorded and discards. The launcher that ran it, which
        also removes its file of `started` records with the last of its runs; another
        one of ours for a run a predecessor's launcher ran."""
        owner = self._owners.pop((run_id, attempt), None)
        live = self._live()
        current = (self._launcher_of(owner) if owner is not None else None) or (live[0] if live else None)
        if current is not None and current.discard(str(self.state_dir), run_id, attempt):
            return
        files.remove(self.state_dir, run_id, attempt)

    def _live(self) -> list[Launcher]:
        """This runner's launchers that are up."""
        return [la for la in self._launchers if la is not None and la.alive]

    def _launcher_of(self, owner: tuple[int, int]) -> Launcher | None:
        """This runner's live launcher with that (pid, start ticks), if it is one of ours."""
        return next((la for la in self._live() if (la.pid, la.ticks) == owner), None)

    def close(self) -> None:
        """Stop watching (the daemon is exiting); supervisors and jobs keep running."""
        for handle in list(self._handles.values()):
            os.close(handle.fd)
            handle.fd = -1
        self._handles.clear()
        self._owners.clear()
        launching = bool(self._live())
        for la in self._launchers:
            if la is not None:
                la.close()
        self._launchers = [None] * len(self._launchers)
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        if launching:
            # the launcher lives on for its runs and removes their cgroups itself: a sweep
            # here took the cgroup it had just made for a run whose job had not entered it
            # yet, and the run failed ("cannot place the job in its cgroup")
            return
        contain.sweep(self.containment.base)  # the cgroups of ended runs; the subtree too once empty
        contain.remove(self.containment.base)

    def _path(self, run_id: str, attempt: int, kind: str) -> str:
        return files.path_of(self.state_dir, run_id, attempt, kind)


def _fork_supervisor(plan: Plan) -> int:
    """Fork the supervisor of `plan`; the child never returns from here."""
    # Stop signals aimed at the daemon must not reach the child before it installs its own
    # handlers; blocked signals stay pending for the parent and the child starts with none.
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED_AROUND_FORK)
    kept = gc.get_freeze_count()  # the daemon keeps its heap frozen (chronod.daemon.kernel.keep_heap)
    gc.freeze()  # the child's collections (none: it disables gc) must not dirty shared pages
    try:
        pid = os.fork()
        if pid == 0:
            supervisor.run(plan)
    finally:
        if not kept:
            gc.unfreeze()
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    return pid


def resolve_identity(
    user: str | None, group: str | None
) -> tuple[Credentials | None, pwd.struct_passwd | None, str | None]:
    """(credentials to switch to, the passwd entry for HOME/USER, an error) for a job.

    Credentials are None when the job runs as the daemon itself. Only a root daemon
    switches; a non-root daemon asked to be someone else returns an error, never a
    fallback to its own identity.
    """
    euid = os.geteuid()
    try:
        account = pwd.getpwnam(user) if user else pwd.getpwuid(euid)
    except KeyError:
        if user:
            return None, None, f"user '{user}' does not exist"
        account = None  # the daemon's own uid has no passwd entry: run as it anyway
    gid = account.pw_gid if account else os.getegid()
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            return None, None, f"group '{group}' does not exist"
    if account is None or (account.pw_uid == euid and gid == os.getegid()):
        return None, account, None
    if euid != 0:
        who = f"user '{user}'" if user else f"group '{group}'"
        return None, None, f"running as {who} needs a root daemon (chronod runs as uid {euid})"
    groups = tuple(os.getgrouplist(account.pw_name, gid))
    return Credentials(account.pw_uid, gid, groups, account.pw_name), account, None


def command_argv(spec: JobSpec) -> tuple[tuple[str, ...], str]:
    """The argv of the job and what argv[0] is ("shell" for string commands)."""
    if isinstance(spec.command, str):
        return (spec.shell, "-c", spec.command), "shell"
    return tuple(spec.command), "command"


def job_environment(account: pwd.struct_passwd | None, spec: JobSpec, chrono_env: dict[str, str]) -> dict[str, str]:
    """The minimal base, then the spec's env, then the CHRONO_* variables.

    The CHRONO_* variables come last so that a spec cannot override the run identity a
    keyed job dedupes on.
    """
    uid = account.pw_uid if account else os.geteuid()
    name = account.pw_name if account else str(uid)
    env = {
        "HOME": account.pw_dir if account else "/",
        "SHELL": (account.pw_shell if account else "") or "/bin/sh",
        "PATH": ROOT_PATH if uid == 0 else USER_PATH,
        "LOGNAME": name,
        "USER": name,
    }
    env.update(spec.env)
    env.update(chrono_env)
    return env


def raise_fd_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to the hard limit (one pidfd per running
    job adds up); return the original limits, which jobs get back."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    return soft, hard


def _exited(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _reap(pid: int) -> bool:
    """Reap `pid` if it has exited; True once it is reaped (or not ours to reap)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        return True  # adopted: its parent is init (or a subreaper), not us


def _kill_leftover_job(started: dict[str, Any]) -> bool:
    """SIGKILL the job group of a dead supervisor if that very job still runs; True if it did."""
    pid, ticks = started.get("pid"), started.get("pid_start_ticks")
    if not pid or ticks is None or started.get("boot_id") != files.boot_id():
        return False
    if files.proc_start_ticks(pid) != ticks:
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True
