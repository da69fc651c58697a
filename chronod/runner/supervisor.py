"""The code that runs in a supervisor: a child forked from the daemon, one per attempt.

It is a fork of the daemon, not a new interpreter, so it must touch as little of the
inherited Python state as possible: it never logs, never returns into the caller's code
and always leaves through `os._exit`. Everything it needs arrives as a `Plan` computed
by the daemon before the fork (user lookups included: name services are not safe to call
in a child forked from a threaded process).

The supervisor detaches (its own session, /dev/null on 0-2, every inherited descriptor
closed), starts the job in a new session of its own, drains the job's output into a
bounded tail while counting every byte, enforces the timeout, obeys SIGUSR1 as a cancel
request, ignores the daemon's stop signals (TERM, INT, HUP), and writes the result file.
"""

from __future__ import annotations

import errno
import gc
import os
import resource
import select
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from types import FrameType

from chronod.core.model import RunState
from chronod.runner import contain, fence, files

CANCEL_SIGNAL = signal.SIGUSR1
IGNORED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
DRAIN_AFTER_EXIT_S = 0.3  # output still buffered when the job ends; longer-lived writers are cut off
_CHUNK = 65536
_MAX_FD = 1 << 20
_DEFAULTED_SIGNALS = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}


@dataclass(frozen=True)
class Credentials:
    """Who the job runs as, resolved by the daemon."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    user: str


@dataclass(frozen=True)
class Plan:
    """Everything a supervisor needs, as plain data. `error` set: fail without starting."""

    run_id: str
    attempt: int
    argv: tuple[str, ...]
    what: str  # "command" or "shell": how a missing argv[0] is described
    env: dict[str, str]
    workdir: str
    stdin: bytes | None
    creds: Credentials | None
    timeout_s: int | None
    kill_grace_s: int
    limit_bytes: int
    nofile: tuple[int, int]  # RLIMIT_NOFILE to give the job (the daemon may have raised its own)
    state_dir: str
    error: str | None = None
    cgroup: str | None = None  # the run's own cgroup (chronod.runner.contain), None: the subreaper fallback
    generation: int = 0  # the launching daemon's: a newer one fenced it off (chronod.runner.fence) and nothing starts


def run(plan: Plan) -> None:
    """Supervise one attempt in the freshly forked child; never returns."""
    code = 70
    try:
        _detach()
        wake_r = _catch_signals()
        _supervise(plan, wake_r)
        code = 0
    except BaseException:
        pass
    finally:
        os._exit(code)


def _detach() -> None:
    gc.disable()
    os.setsid()
    contain.become_subreaper()  # orphans of the job are ours to kill and reap
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, _MAX_FD)


def _catch_signals() -> int:
    """Route the cancel and stop signals to a wakeup pipe; return its read end.

    Caught (not ignored, not blocked) so that the job's exec resets them to the default.
    The daemon blocked these signals around the fork; they are unblocked here.
    """
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    for sig in (CANCEL_SIGNAL, *IGNORED_SIGNALS):
        signal.signal(sig, _noted)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    return wake_r


def _noted(signum: int, frame: FrameType | None) -> None:  # the wakeup pipe carries the signal number
    pass


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _supervise(plan: Plan, wake_r: int) -> None:
    started_at = _now()
    if plan.error:
        _write_result(plan, RunState.FAILED, started_at, error=plan.error)
        return
    out_r, out_w = os.pipe()
    stdin_fd = _stdin_fd(plan.stdin)
    with fence.StartGate(plan.state_dir) as gate:
        if gate.fenced(plan.generation):
            return  # a newer daemon settled this run: never start it (no result: it did not run)
        if plan.creds is not None or plan.cgroup is not None:
            pid, failure = _fork_exec(plan, stdin_fd, out_w, -1 if gate.fd is None else gate.fd)
        else:
            pid, failure = _spawn(plan, stdin_fd, out_w)
        os.close(out_w)
        os.close(stdin_fd)
        if failure is None:
            try:
                _write_started(plan, pid, started_at)
            except OSError:
                pass  # only adoption by a later daemon needs it; the result still gets written
    if failure is not None:
        _write_result(plan, RunState.FAILED, started_at, error=_describe(plan, *failure))
        return
    watch = _Watch(plan, pid, out_r, wake_r)
    status = watch.until_exit()
    watch.drain_briefly()
    state, code, sig, error = _verdict(plan, status, watch.reason)
    _write_result(plan, state, started_at, code=code, sig=sig, error=error, pid=pid, tail=watch.tail, total=watch.total)
    contain.remove(plan.cgroup)  # busy while a background process of a job that ended well lives on


def _stdin_fd(text: bytes | None) -> int:
    if text is None:
        return os.dup(0)  # the supervisor's own stdin is /dev/null already
    fd = os.memfd_create("chrono-stdin", os.MFD_CLOEXEC)
    view = memoryview(text)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _spawn(
    plan: Plan, stdin_fd: int, out_w: int, setsigdef: Iterable[int] = _DEFAULTED_SIGNALS
) -> tuple[int, tuple[str, int] | None]:
    """Start the job with posix_spawn (a vfork: no copy of this process's page tables),
    with the signals in `setsigdef` back to their defaults.

    For jobs that keep the daemon's identity. posix_spawn starts the child where its caller
    stands, so this enters the workdir and takes the job's descriptor limit and PATH: a
    supervisor keeps them (only its children care), the launcher restores its own after.
    """
    try:
        os.chdir(plan.workdir)
    except OSError as e:
        return 0, ("workdir", e.errno or 0)
    resource.setrlimit(resource.RLIMIT_NOFILE, plan.nofile)
    # posix_spawnp searches the caller's PATH; make it the job's.
    os.environ["PATH"] = plan.env.get("PATH", "")
    try:
        pid = os.posix_spawnp(
            plan.argv[0],
            list(plan.argv),
            plan.env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, stdin_fd, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, out_w, 2),
            ],
            setsid=True,
            setsigmask=(),
            setsigdef=setsigdef,
        )
    except OSError as e:
        return 0, ("exec", e.errno or 0)
    return pid, None


def _fork_exec(plan: Plan, stdin_fd: int, out_w: int, hold: int = -1) -> tuple[int, tuple[str, int] | None]:
    """Start the job in a forked child that enters the run's cgroup and switches user
    before exec.

    `hold` is the start gate's descriptor (chronod.runner.fence), close-on-exec: the child
    keeps it open, so the start lock is let go by the exec itself. Should the caller be
    killed in the middle of the start (stopped, and a new daemon took over), the new
    daemon's exclusive lock waits for the child to have exec'd: by then the job is in its
    cgroup and carries its run's tag, and it is killed with the run before it is settled."""
    if plan.cgroup is not None:
        try:
            contain.create(plan.cgroup)
        except OSError as e:
            return 0, ("cgroup", e.errno or 0)
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _exec_job(plan, stdin_fd, out_w, err_w, hold)
    os.close(err_w)
    failure = _read_exec_failure(err_r)
    if failure is not None:
        os.waitpid(pid, 0)
    return pid, failure


def _exec_job(plan: Plan, stdin_fd: int, out_w: int, err_w: int, hold: int = -1) -> None:
    """In the job's child: new session, credentials (supplementary groups, gid, uid, in
    that order), workdir as the new user, descriptors, signals, exec. Never returns."""
    step = "cgroup"
    try:
        if plan.cgroup is not None:
            contain.enter(plan.cgroup)  # before anything it starts can leave
        step = "session"
        os.setsid()
        if plan.creds is not None:
            step = "credentials"
            os.setgroups(list(plan.creds.groups))
            os.setgid(plan.creds.gid)
            os.setuid(plan.creds.uid)
        step = "workdir"
        os.chdir(plan.workdir)
        step = "descriptors"
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        _close_all_but(err_w, hold)  # both close-on-exec: the exec closes them
        _default_signals()
        resource.setrlimit(resource.RLIMIT_NOFILE, plan.nofile)
        step = "exec"
        os.execvpe(plan.argv[0], list(plan.argv), plan.env)
    except OSError as e:
        os.write(err_w, f"{step}:{e.errno}".encode())
    except BaseException:
        os.write(err_w, f"{step}:0".encode())
    os._exit(127)


def _close_all_but(*keep: int) -> None:
    """Close every descriptor from 3 up except those in `keep`."""
    low = 3
    for fd in sorted(k for k in keep if k >= low):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _MAX_FD)


def _default_signals() -> None:
    for sig in _DEFAULTED_SIGNALS:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def _read_exec_failure(err_r: int) -> tuple[str, int] | None:
    """("workdir", ENOENT)-style failure reported by the child; None once exec succeeded."""
    data = b""
    while True:
        chunk = os.read(err_r, 256)
        if not chunk:
            break
        data += chunk
    os.close(err_r)
    if not data:
        return None
    step, _, num = data.decode().partition(":")
    return step, int(num or 0)


def _describe(plan: Plan, step: str, num: int) -> str:
    """An operator-facing reason the job could not start."""
    reason = os.strerror(num) if num else "unexpected error"
    who = f" as user '{plan.creds.user}'" if plan.creds else ""
    if step == "workdir":
        if num == errno.ENOENT:
            return f"workdir does not exist: {plan.workdir}"
        if num == errno.ENOTDIR:
            return f"workdir is not a directory: {plan.workdir}"
        if num == errno.EACCES:
            return f"workdir not accessible{who}: {plan.workdir}"
        return f"cannot enter workdir {plan.workdir}{who}: {reason}"
    if step == "exec":
        name = plan.argv[0]
        if num == errno.ENOENT:
            return f"{plan.what} not found: {name}"
        if num == errno.EACCES:
            return f"permission denied{who}: {name} (not executable, or a directory on its path is not searchable)"
        if num == errno.ENOEXEC:
            return f"not an executable file: {name} (missing '#!' line?)"
        return f"cannot execute {name}{who}: {reason}"
    if step == "cgroup":
        return f"cannot place the job in its cgroup {plan.cgroup}: {reason}"
    if step == "credentials" and plan.creds is not None:
        return f"cannot switch to user '{plan.creds.user}' (uid {plan.creds.uid}, gid {plan.creds.gid}): {reason}"
    return f"cannot start the job ({step}): {reason}"


def _write_started(plan: Plan, pid: int, started_at: datetime) -> None:
    me = os.getpid()
    record = {
        "run_id": plan.run_id,
        "attempt": plan.attempt,
        "supervisor_pid": me,
        "supervisor_start_ticks": files.proc_start_ticks(me),
        "pid": pid,
        "pid_start_ticks": files.proc_start_ticks(pid),
        "started_at": started_at.isoformat(),
        "boot_id": files.boot_id(),
        "cgroup": plan.cgroup,
    }
    files.write_json(files.path_of(plan.state_dir, plan.run_id, plan.attempt, files.STARTED), record, durable=False)


class _Watch:
    """The supervisor's loop over one running job: output, signals, deadlines, exit."""

    def __init__(self, plan: Plan, pid: int, out_r: int, wake_r: int):
        self.plan, self.pid, self.out_r, self.wake_r = plan, pid, out_r, wake_r
        self.tail = bytearray()
        self.total = 0
        self.live = _open_live(plan)
        self.reason: str | None = None  # "timed_out" | "cancelled" once we started killing
        self.out_open = True
        self.pidfd = os.pidfd_open(pid)
        self.poller = select.poll()
        for fd in (out_r, self.pidfd, wake_r):
            self.poller.register(fd, select.POLLIN)
        now = time.monotonic()
        self.deadline = now + plan.timeout_s if plan.timeout_s else None
        self.kill_at: float | None = None

    def until_exit(self) -> int:
        """Serve the job until it (the group leader) exits; return its wait status."""
        while True:
            self._deadlines(time.monotonic())
            for fd, _ in self.poller.poll(self._wait_ms(time.monotonic())):
                if fd == self.out_r:
                    self._read()
                elif fd == self.wake_r:
                    self._signals()
                elif fd == self.pidfd:
                    _, status = os.waitpid(self.pid, 0)
                    self._finish_kill()
                    return status

    def drain_briefly(self) -> None:
        """Read what the job left in the pipe, for at most DRAIN_AFTER_EXIT_S.

        A background child that inherited the pipe may keep it open for hours; the run
        is over when its leader is, so that child's later output is not waited for.
        """
        self.poller.unregister(self.pidfd)
        self.poller.unregister(self.wake_r)
        end = time.monotonic() + DRAIN_AFTER_EXIT_S
        while self.out_open:
            left = end - time.monotonic()
            if left <= 0 or not self.poller.poll(int(left * 1000) + 1):
                return
            self._read()

    def _read(self) -> None:
        data = os.read(self.out_r, _CHUNK)
        if not data:
            self.out_open = False
            self.poller.unregister(self.out_r)
            return
        self.total += len(data)
        self._live(data)
        self.tail += data
        excess = len(self.tail) - self.plan.limit_bytes
        if excess > 0:
            del self.tail[:excess]

    def _live(self, data: bytes) -> None:
        """Append `data` to the live output file while it stays under its bound; past it the
        file stops growing (the stored tail still ends with the latest output)."""
        if self.live is None:
            return
        room = files.live_limit(self.plan.limit_bytes) - (self.total - len(data))
        try:
            if room > 0:
                os.write(self.live, data[:room])
            if room <= len(data):
                os.close(self.live)
                self.live = None
        except OSError:
            self.live = None

    def _signals(self) -> None:
        try:
            got = os.read(self.wake_r, 256)
        except BlockingIOError:
            return
        if CANCEL_SIGNAL in got and self.reason is None:
            self._start_kill(RunState.CANCELLED, time.monotonic())

    def _deadlines(self, now: float) -> None:
        if self.deadline is not None and self.reason is None and now >= self.deadline:
            self._start_kill(RunState.TIMED_OUT, now)
        if self.kill_at is not None and now >= self.kill_at:
            self.kill_at = None
            _stop(self.plan, self.pid, signal.SIGKILL)

    def _start_kill(self, reason: str, now: float) -> None:
        self.reason = reason
        _stop(self.plan, self.pid, signal.SIGTERM)
        self.kill_at = now + self.plan.kill_grace_s

    def _finish_kill(self) -> None:
        # The leader is gone; whatever else is left of a run we were told to stop goes now,
        # in its group or not.
        if self.reason is not None:
            contain.kill_run(self.plan.cgroup, self.plan.env.get(contain.TAG, ""))

    def _wait_ms(self, now: float) -> int:
        times = [t for t in (None if self.reason else self.deadline, self.kill_at) if t is not None]
        if not times:
            return -1
        return max(0, int((min(times) - now) * 1000) + 1)


def _open_live(plan: Plan) -> int | None:
    """The live output file of this attempt, opened for appending (None if it cannot be)."""
    try:
        return files.open_new(files.live_path(plan.state_dir, plan.run_id, plan.attempt), os.O_APPEND)
    except OSError:
        return None


def _stop(plan: Plan, pgid: int, sig: int) -> None:
    """`sig` to the job's group and every other process of the run (its cgroup, or in the
    fallback every process whose environment names the attempt)."""
    contain.stop_run(plan.cgroup, plan.env.get(contain.TAG, ""), pgid, sig)


def _verdict(plan: Plan, status: int, reason: str | None) -> tuple[str, int | None, int | None, str | None]:
    """(state, exit_code, signal, error) from a wait status and why we killed, if we did."""
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if reason == RunState.TIMED_OUT:
        return RunState.TIMED_OUT, code, sig, f"killed after timeout {plan.timeout_s}s"
    if reason == RunState.CANCELLED:
        return RunState.CANCELLED, code, sig, "cancelled: every process of the run was sent SIGTERM"
    if code == 0:
        return RunState.SUCCEEDED, 0, None, None
    if sig is not None:
        return RunState.FAILED, None, sig, f"killed by signal {sig} ({signal.Signals(sig).name})"
    return RunState.FAILED, code, None, f"exit code {code}"


def _write_result(
    plan: Plan,
    state: str,
    started_at: datetime,
    *,
    code: int | None = None,
    sig: int | None = None,
    error: str | None = None,
    pid: int | None = None,
    tail: bytes | bytearray = b"",
    total: int = 0,
) -> None:
    record = {
        "run_id": plan.run_id,
        "attempt": plan.attempt,
        "state": state,
        "exit_code": code,
        "signal": sig,
        "started_at": started_at.isoformat(),
        "finished_at": _now().isoformat(),
        "output_tail": bytes(tail).decode("utf-8", "backslashreplace"),
        "output_bytes": total,
        "error": error,
        "pid": pid,
    }
    files.write_json(files.path_of(plan.state_dir, plan.run_id, plan.attempt, files.RESULT), record, durable=True)
