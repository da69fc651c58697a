"""The launcher's own process: one event loop that starts and supervises many runs.

Spawned once by the daemon (chronod.runner.launcher), in a session of its own, it does for
every run what a per-attempt supervisor did (chronod.runner.supervisor): starts the job
in its own process group and its own cgroup (chronod.runner.contain; posix_spawn, into
the run's cgroup by stepping into it for the instant of the spawn; fork + exec for a job
that changes user), drains
its output into a bounded tail while counting every byte, enforces the timeout, obeys a
cancel, reaps the job and writes its `started` and `result` files. One epoll watches every
output pipe and every job's pidfd; timeouts sit in one heap.

Results are made durable in batches: every result the loop produced in one turn is
written to its temporary file, the file system is flushed once (`syncfs`), then each is
renamed into place and the directory is flushed once. Only then is the run's end pipe
closed, the daemon's signal that the result is on disk.

Every start happens under the fence of chronod.runner.fence: a request of a daemon that
is gone, or that a newer one replaced, is never started. The loop is a child subreaper:
the orphans of its jobs are its children, reaped here and killed with their run.

The loop outlives the daemon: when the daemon's socket closes it launches nothing more,
finishes the runs it owns and exits. A later daemon reaches it through an abstract Unix
socket named after its pid and start time, to watch a run it adopts or to cancel one.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import json
import os
import pickle
import queue
import resource
import select
import signal
import socket
import struct
import threading
import time
from datetime import datetime, timezone
from typing import Any

from chronod.core.model import RunState
from chronod.runner import contain, fence, files, supervisor
from chronod.runner.supervisor import Plan

DRAIN_AFTER_EXIT_S = supervisor.DRAIN_AFTER_EXIT_S
GATE_STARTS = 32  # starts under one hold of the start gate: a new daemon waits for it (chronod.runner.fence)
REMOVE_WHEN_QUIET_S = 2.0  # files of recorded runs are removed once no launch came for this long
RESULTS_WAIT_MAX_S = 1.0  # results wait for the launches queued behind them at most this long
_CHUNK = 65536
_MAX_FD = 1 << 20
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_libc = ctypes.CDLL(None, use_errno=True)


def _now() -> datetime:
    return datetime.now(timezone.utc)


class _Run:
    """One job the loop supervises."""

    __slots__ = (
        "plan", "key", "pid", "pidfd", "out_r", "live", "tail", "total", "reason",
        "deadline", "kill_at", "status", "started_at", "ends", "ended", "result",
    )  # fmt: skip

    def __init__(self, plan: Plan, end_fd: int):
        self.plan = plan
        self.key = (plan.run_id, plan.attempt)
        self.pid = 0
        self.pidfd = -1
        self.out_r = -1
        self.live: int | None = None
        self.tail = bytearray()
        self.total = 0
        self.reason: str | None = None
        self.deadline: float | None = None
        self.kill_at: float | None = None
        self.status: int | None = None
        self.started_at = _now()
        self.ends = [end_fd]  # closed once the result is on disk: the daemon's signal
        self.ended = False
        self.result = b""


class Loop:
    """The launcher's state: its runs, its epoll, its timers, the results to flush."""

    def __init__(self, ctl: socket.socket, listener: socket.socket, child_wake: int = -1):
        self.ctl, self.listener = ctl, listener
        self.ep = select.epoll()
        self.ep.register(ctl.fileno(), select.EPOLLIN)
        self.ep.register(listener.fileno(), select.EPOLLIN)
        if child_wake >= 0:
            self.ep.register(child_wake, select.EPOLLIN)
        self.child_wake = child_wake
        self.leaders: dict[int, _Run] = {}  # job pid -> its run, until reaped
        self.reaped: dict[int, int] = {}  # job pid -> wait status, reaped with the orphans
        self.gates: dict[str, int] = {}  # state dir -> its generation file, open
        self.lingering: set[str] = set()  # cgroups of ended runs a background process still holds
        self.runs: dict[tuple[str, int], _Run] = {}
        self.by_fd: dict[int, tuple[str, _Run]] = {}
        self.timers: list[tuple[float, int, str, _Run]] = []
        self.seq = 0
        self.batch: list[_Run] = []
        self.batch_at = 0.0  # monotonic: when the oldest result of `batch` was produced
        # files of recorded runs, removed by a thread of their own: an unlink can wait on
        # the file system's journal, and a burst of launches must not wait with it
        self.discards: queue.SimpleQueue[tuple[str, str, int] | tuple[str] | None] = queue.SimpleQueue()
        self.launched_at = [0.0]  # the last launch's monotonic time, for the remover to wait for a quiet moment
        self.remover = threading.Thread(target=_remove_files, args=(self.discards, self.launched_at), daemon=True)
        self.records = _Records(self.discards)
        self.remover.start()
        self.daemon_gone = False
        self.daemon_pid = os.getppid()  # the chronod that spawned us: once it is gone, start nothing more
        self.own_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
        # posix_spawn resets caught signals itself; naming only the ignored ones spares
        # the child a sigaction for each of the 64 signals
        self.ignored = [s for s in signal.valid_signals() if signal.getsignal(s) == signal.SIG_IGN]
        # the cgroup the loop lives in and steps back to after each spawn into a run's own
        # (`_spawn_in`); None, where it cannot be told or written, starts jobs in their
        # cgroups by fork + exec
        self.home = contain.own_dir()
        if self.home is not None and not os.access(os.path.join(self.home, "cgroup.procs"), os.W_OK):
            self.home = None
        self.away = False  # standing in the cgroup of the run it last spawned (`_launch_all`)

    # -- the loop ---------------------------------------------------------------------

    def serve(self) -> None:
        """Run until the daemon is gone and every run has ended and been flushed."""
        while not (self.daemon_gone and not self.runs and not self.batch):
            self._turn()
        self.records.close()
        self.discards.put(None)
        self.remover.join()

    def _turn(self) -> None:
        """One turn: every event ready, the timers due, then the results produced."""
        for fd, _ in self.ep.poll(self._wait_s()):
            try:
                self._event(fd)
            except Exception as e:  # one bad event must not end every other run
                os.write(2, f"chrono launcher: {type(e).__name__}: {e}\n".encode())
        self._fire_timers(time.monotonic())
        if not self._launches_first():
            self._flush()

    def _launches_first(self) -> bool:
        """Whether the results wait for the launches the daemon queued meanwhile (a burst):
        the next turn starts those first. A flush of the file system waits for every
        write on it, and in a burst of 1,000 the flushes between turns of launches were
        a tenth of the launcher's time. The results wait at most RESULTS_WAIT_MAX_S, as
        the daemon's endings do; their end pipes stay open until they are on disk."""
        if not self.batch or self.daemon_gone or time.monotonic() - self.batch_at > RESULTS_WAIT_MAX_S:
            return False
        return _pending(self.ctl)

    def _event(self, fd: int) -> None:
        if fd == self.ctl.fileno():
            self._from_daemon()
            return
        if fd == self.listener.fileno():
            self._visitor()
            return
        if fd == self.child_wake:
            self._reap_orphans()
            return
        kind, run = self.by_fd[fd]
        if kind == "out":
            self._read(run)
        else:
            self._exited(run)

    def _wait_s(self) -> float:
        if self.batch:
            return 0
        if not self.timers:
            return -1
        return max(0.0, self.timers[0][0] - time.monotonic())

    def _timer(self, when: float, kind: str, run: _Run) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, kind, run))

    def _fire_timers(self, now: float) -> None:
        while self.timers and self.timers[0][0] <= now:
            _, _, kind, run = heapq.heappop(self.timers)
            if run.ended:
                continue
            if kind == "deadline" and run.reason is None and run.status is None:
                self._start_kill(run, RunState.TIMED_OUT, now)
            elif kind == "kill" and run.kill_at is not None and run.status is None:
                run.kill_at = None
                _stop(run, signal.SIGKILL)
            elif kind == "drain":
                self._end(run)

    # -- requests ---------------------------------------------------------------------

    def _from_daemon(self) -> None:
        """Every request the daemon has queued (a burst of launches is served in one turn).
        Launches in a row are started together (`_launch_all`); any other request is
        served after the launches read before it, in the order the daemon sent them."""
        launches: list[tuple[Plan, int]] = []
        try:
            for _ in range(256):
                got = _receive(self.ctl)
                if got is None:
                    self.daemon_gone = True
                    self.ep.unregister(self.ctl.fileno())
                    return
                msg, fds = got
                if msg[0] == "launch" and fds:
                    for extra in fds[1:]:
                        os.close(extra)
                    launches.append((msg[1], fds[0]))
                else:
                    batch, launches = launches, []
                    self._launch_all(batch)
                    self._request(msg, fds)
                if not _pending(self.ctl):
                    return
        finally:
            batch, launches = launches, []
            self._launch_all(batch)

    def _visitor(self) -> None:
        """A later daemon asking to watch or cancel a run it adopted."""
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(2)
            _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if uid not in (0, os.geteuid()):
                return
            try:
                got = _receive(conn)
            except (OSError, pickle.PickleError, EOFError):
                return
            if got is not None:
                self._request(*got)

    def _request(self, msg: tuple[Any, ...], fds: list[int]) -> None:
        """`("launch", plan)` + end pipe, `("watch", run_id, attempt)` + end pipe, or
        `("cancel", run_id, attempt)`."""
        verb, end = msg[0], (fds[0] if fds else None)
        for extra in fds[1:]:
            os.close(extra)
        if verb == "launch" and end is not None:
            self._launch(msg[1], end)
            return
        if verb == "discard":
            self.discards.put((msg[3], msg[1], msg[2]))
            self.records.recorded(msg[3], msg[1], msg[2])
            return
        run = self.runs.get((msg[1], msg[2])) if verb in ("watch", "cancel") else None
        if verb == "watch" and end is not None and run is not None and not run.ended:
            run.ends.append(end)
            return
        if end is not None:
            os.close(end)  # ended (its result is on disk) or never ours: the watcher reads the files
        if verb == "cancel" and run is not None and run.reason is None and run.status is None:
            self._start_kill(run, RunState.CANCELLED, time.monotonic())

    # -- one run ----------------------------------------------------------------------

    def _launch(self, plan: Plan, end_fd: int) -> None:
        self._launch_all([(plan, end_fd)])

    def _launch_all(self, launches: list[tuple[Plan, int]]) -> None:
        """Start a turn's launches together, up to GATE_STARTS under one hold of the state
        directory's start gate (a new daemon taking over waits for it, and kills a holder
        past 5 s), stepping from one run's cgroup straight into the next one's and home
        at the end of each hold: about one cgroup move per start instead of two."""
        if not launches:
            return
        self.launched_at[0] = time.monotonic()
        try:
            for state_dir, same_dir in itertools.groupby(launches, key=lambda launch: launch[0].state_dir):
                group = list(same_dir)
                for i in range(0, len(group), GATE_STARTS):
                    with fence.StartGate(state_dir, self._gate(state_dir)) as gate:
                        try:
                            for plan, end_fd in group[i : i + GATE_STARTS]:
                                self._launch_fenced(gate, plan, end_fd)
                        finally:
                            self.records.write(state_dir)  # before the gate is let go
                            self._step_home()
        finally:
            self._step_home()

    def _launch_fenced(self, gate: fence.StartGate, plan: Plan, end_fd: int) -> None:
        if os.getppid() != self.daemon_pid:
            # read from the socket after the daemon died (we were stopped, or swamped), or
            # it died while this turn's launches were started: the next chronod settles
            # this run (`lost`, or a new attempt), so it never starts
            os.close(end_fd)
            os.write(2, f"chrono launcher: run {plan.run_id} attempt {plan.attempt} not started: "
                        f"the chronod that asked for it (pid {self.daemon_pid}) is gone\n".encode())  # fmt: skip
            return
        if gate.fenced(plan.generation):
            # queued by a daemon another one replaced, which has settled this run
            # already (`lost`, or a new attempt): it must never start now
            os.close(end_fd)
            os.write(2, f"chrono launcher: run {plan.run_id} attempt {plan.attempt} not started: "
                        f"another chronod (generation {gate.current}) owns {plan.state_dir}\n".encode())  # fmt: skip
            return
        try:
            self._launch_gated(plan, end_fd)
        except Exception as e:  # one bad launch must not keep the others of the turn from starting
            os.write(2, f"chrono launcher: run {plan.run_id}: {type(e).__name__}: {e}\n".encode())

    def _gate(self, state_dir: str) -> int | None:
        fd = self.gates.get(state_dir)
        if fd is None:
            try:
                fd = self.gates[state_dir] = fence._open(state_dir)
            except OSError:
                return None
        return fd

    def _launch_gated(self, plan: Plan, end_fd: int) -> None:
        run = _Run(plan, end_fd)
        if run.key in self.runs:
            os.close(end_fd)  # the daemon never sends one twice; if it did, it learns nothing
            return
        self._tidy_cgroups()
        for stale in (files.path_of(plan.state_dir, *run.key, files.RESULT), files.live_path(plan.state_dir, *run.key)):
            _unlink(stale)  # of an earlier life of this attempt (a restored database): never its outcome
        self.runs[run.key] = run
        if plan.error:
            self._finish(run, RunState.FAILED, error=plan.error)
            return
        try:
            failure = self._start(run)
        except Exception as e:  # never lose the loop (and every other run) to one job
            failure = None
            self._finish(run, RunState.FAILED, error=f"cannot start the job: {e}")
            return
        if failure is not None:
            self._finish(run, RunState.FAILED, error=supervisor._describe(plan, *failure))
            return
        self._watch(run)

    def _start(self, run: _Run) -> tuple[str, int] | None:
        plan = run.plan
        out_r, out_w = os.pipe()
        stdin_fd = supervisor._stdin_fd(plan.stdin)
        try:
            if plan.creds is None and plan.cgroup is not None and self.home is not None:
                pid, failure = self._spawn_in(plan.cgroup, plan, stdin_fd, out_w)
            else:
                self._step_home()  # a job not spawned into a cgroup of its own is never born in another run's
                if plan.creds is not None or plan.cgroup is not None:
                    hold = self.gates.get(plan.state_dir, -1)  # the start lock, let go by the job's exec
                    pid, failure = supervisor._fork_exec(plan, stdin_fd, out_w, hold)
                else:
                    pid, failure = self._spawn(plan, stdin_fd, out_w)
        finally:
            os.close(out_w)
            os.close(stdin_fd)
        if failure is not None:
            os.close(out_r)
            return failure
        run.pid, run.out_r = pid, out_r
        self.leaders[pid] = run
        return None

    def _spawn_in(self, cgroup: str, plan: Plan, stdin_fd: int, out_w: int) -> tuple[int, tuple[str, int] | None]:
        """posix_spawn of the job born in its run's cgroup: a child starts in its parent's
        cgroup, so the loop steps into the run's cgroup for the spawn, and back home once
        the turn's launches are started (`_launch_all`; the next launch of the turn steps
        from this cgroup straight into its own). A fork of this process whose child entered
        the cgroup itself cost 3.5 ms of CPU a run, this 0.8 ms (bench/README.md, "The cost
        of a start in a cgroup").

        The spawned child holds a copy of the start gate's descriptor (close-on-exec) until
        its exec, as a forked one does (chronod.runner.fence), and it is in its cgroup from
        its first instruction. Should the loop be killed while it stands in the cgroup, it
        dies there; it is never left there alive: if it cannot step back (the kernel
        refuses that only when it is out of memory), it ends, since the end of the run would
        end it with the run's processes (the daemon then settles every run it can no
        longer vouch for)."""
        try:
            contain.create(cgroup)
            contain.enter(cgroup)
        except OSError as e:
            return 0, ("cgroup", e.errno or 0)
        self.away = True
        return self._spawn(plan, stdin_fd, out_w)

    def _step_home(self) -> None:
        """Back into the loop's own cgroup, if it stands in a run's."""
        if not self.away:
            return
        assert self.home is not None
        error: OSError | None = None
        for _ in range(3):
            try:
                contain.enter(self.home)
                self.away = False
                return
            except OSError as e:
                error = e
        os.write(2, f"chrono launcher: cannot move back to its cgroup {self.home}: {error}; exiting\n".encode())
        os._exit(70)

    def _spawn(self, plan: Plan, stdin_fd: int, out_w: int) -> tuple[int, tuple[str, int] | None]:
        """posix_spawn (a vfork) of the job, in its workdir, with the daemon's original
        descriptor limit; the loop's own directory and limit are restored after."""
        try:
            return supervisor._spawn(plan, stdin_fd, out_w, self.ignored)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, self.own_nofile)
            os.chdir("/")

    def _watch(self, run: _Run) -> None:
        run.pidfd = os.pidfd_open(run.pid)
        os.set_blocking(run.out_r, False)
        self.ep.register(run.out_r, select.EPOLLIN)
        self.ep.register(run.pidfd, select.EPOLLIN)
        self.by_fd[run.out_r] = ("out", run)
        self.by_fd[run.pidfd] = ("pid", run)
        if run.plan.timeout_s:
            run.deadline = time.monotonic() + run.plan.timeout_s
            self._timer(run.deadline, "deadline", run)
        self.records.add(run)

    def _read(self, run: _Run) -> None:
        try:
            data = os.read(run.out_r, _CHUNK)
        except BlockingIOError:
            return
        if not data:
            self._close_out(run)
            if run.status is not None:
                self._end(run)
            return
        run.total += len(data)
        _append_live(run, data)
        run.tail += data
        excess = len(run.tail) - run.plan.limit_bytes
        if excess > 0:
            del run.tail[:excess]

    def _exited(self, run: _Run) -> None:
        self.leaders.pop(run.pid, None)
        status = self.reaped.pop(run.pid, None)
        run.status = status if status is not None else os.waitpid(run.pid, 0)[1]
        self.ep.unregister(run.pidfd)
        del self.by_fd[run.pidfd]
        os.close(run.pidfd)
        run.pidfd = -1
        if run.reason is not None:
            _stop(run, signal.SIGKILL)  # what is left of a run we were told to stop, in its group or not
        if run.out_r < 0:
            self._end(run)
        else:
            self._timer(time.monotonic() + DRAIN_AFTER_EXIT_S, "drain", run)

    def _start_kill(self, run: _Run, reason: str, now: float) -> None:
        run.reason = reason
        _stop(run, signal.SIGTERM)
        run.kill_at = now + run.plan.kill_grace_s
        self._timer(run.kill_at, "kill", run)

    def _close_out(self, run: _Run) -> None:
        if run.out_r >= 0:
            self.ep.unregister(run.out_r)
            del self.by_fd[run.out_r]
            os.close(run.out_r)
            run.out_r = -1
        if run.live is not None:
            os.close(run.live)
            run.live = None

    def _end(self, run: _Run) -> None:
        """The leader was reaped and its output drained (or the drain time is up)."""
        self._close_out(run)
        state, code, sig, error = supervisor._verdict(run.plan, run.status or 0, run.reason)
        self._finish(run, state, code=code, sig=sig, error=error, pid=run.pid)

    def _finish(self, run: _Run, state: str, **fields: Any) -> None:
        if run.ended:
            return
        run.ended = True
        record = {
            "run_id": run.plan.run_id,
            "attempt": run.plan.attempt,
            "state": state,
            "exit_code": fields.get("code"),
            "signal": fields.get("sig"),
            "started_at": run.started_at.isoformat(),
            "finished_at": _now().isoformat(),
            "output_tail": bytes(run.tail).decode("utf-8", "backslashreplace"),
            "output_bytes": run.total,
            "error": fields.get("error"),
            "pid": fields.get("pid"),
        }
        run.tail = bytearray()
        run.result = json.dumps(record, sort_keys=True).encode()
        if not self.batch:
            self.batch_at = time.monotonic()
        self.batch.append(run)

    # -- durability -------------------------------------------------------------------

    def _flush(self) -> None:
        """Write this turn's results: one file system flush and one directory flush for
        the lot, then tell each watcher (close its end pipe)."""
        if not self.batch:
            return
        batch, self.batch = self.batch, []
        written = []
        for run in batch:
            path = files.path_of(run.plan.state_dir, run.plan.run_id, run.plan.attempt, files.RESULT)
            try:
                _write(path + ".tmp", run.result)
                written.append((run, path))
            except OSError:
                pass  # no result file: the daemon records the run lost, with the reason
        dirs = {os.path.dirname(path) for _, path in written}
        for d in dirs:
            try:
                _sync_fs(d)
            except OSError:
                pass
        for _, path in written:
            try:
                os.rename(path + ".tmp", path)
            except OSError:
                pass  # as above: recorded lost
        for d in dirs:
            try:
                _fsync_dir(d)
            except OSError:
                pass
        for run in batch:
            for fd in run.ends:
                os.close(fd)
            run.ends = []
            self.runs.pop(run.key, None)
            if run.plan.cgroup is not None and not contain.remove(run.plan.cgroup):
                self.lingering.add(run.plan.cgroup)

    # -- what is left of runs -----------------------------------------------------------

    def _reap_orphans(self) -> None:
        """Reap every child that exited: the jobs' orphans adopted by this subreaper, and
        job leaders (their status kept for `_exited`, which their pidfd wakes)."""
        try:
            os.read(self.child_wake, 512)
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.leaders:
                self.reaped[pid] = status

    def _tidy_cgroups(self) -> None:
        """Remove the cgroups of ended runs whose background processes have gone since."""
        if self.lingering:
            self.lingering = {path for path in self.lingering if not contain.remove(path)}


class _Records:
    """The `started` records of the launcher's runs: those of a turn's launches written
    together, one file per turn (chronod.runner.files.write_launched), and each file
    removed with the last of its runs whose outcome the daemon has stored."""

    def __init__(self, discards: queue.SimpleQueue[Any]):
        self.discards = discards  # the remover thread's queue
        self.pending: list[dict[str, Any]] = []
        self.seq = 0
        self.dirs: dict[str, int] = {}  # state dir -> its `launched` directory, open
        self.left: dict[str, set[tuple[str, str, int]]] = {}  # file -> its runs not recorded yet
        self.file_of: dict[tuple[str, str, int], str] = {}  # (state dir, run id, attempt) -> file

    def add(self, run: _Run) -> None:
        self.pending.append(_started_record(run))

    def write(self, state_dir: str) -> None:
        """Write the records added since the last call, under the start gate still held."""
        if not self.pending:
            return
        records, self.pending = self.pending, []
        self.seq += 1
        name = files.launched_name(os.getpid(), _SELF[0], self.seq)
        try:
            dir_fd = self.dirs.get(state_dir)
            if dir_fd is None:
                dir_fd = files.open_launched_dir(state_dir, create=True)
                if dir_fd is None:
                    return
                self.dirs[state_dir] = dir_fd
            files.write_launched(dir_fd, name, records)
        except OSError:
            return  # only adoption by a later daemon needs them; the results still get written
        path = os.path.join(state_dir, files.LAUNCHED, name)
        keys = {(state_dir, r["run_id"], r["attempt"]) for r in records}
        self.left[path] = keys
        for key in keys:
            self._forget(key)  # an earlier life of the attempt (a restored database)
            self.file_of[key] = path

    def recorded(self, state_dir: str, run_id: str, attempt: int) -> None:
        """The daemon stored the run's outcome: its record is needed no more."""
        self._forget((state_dir, run_id, attempt))

    def _forget(self, key: tuple[str, str, int]) -> None:
        path = self.file_of.pop(key, None)
        if path is None:
            return
        left = self.left[path]
        left.discard(key)
        if not left:
            del self.left[path]
            self.discards.put((path,))

    def close(self) -> None:
        """The launcher exits, every run's result on disk: a later daemon reads those, and
        finds no record of a launcher that is gone."""
        for path in self.left:
            self.discards.put((path,))
        self.left.clear()
        self.file_of.clear()
        for fd in self.dirs.values():
            os.close(fd)
        self.dirs.clear()


# ------------------------------------------------------------------------------ helpers


def _receive(sock: socket.socket) -> tuple[tuple[Any, ...], list[int]] | None:
    """One framed request (a pickled tuple) and the descriptors sent with it."""
    head, fds, _, _ = socket.recv_fds(sock, 4, 4, socket.MSG_CMSG_CLOEXEC)
    for fd in fds:
        os.set_inheritable(fd, False)  # a job (or its background child) must never hold one
    if not head:
        return None
    while len(head) < 4:
        more = sock.recv(4 - len(head))
        if not more:
            return None
        head += more
    size = int.from_bytes(head, "big")
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return pickle.loads(body), fds


def _pending(sock: socket.socket) -> bool:
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False


def _started_record(run: _Run) -> dict[str, Any]:
    me = os.getpid()
    return {
        "run_id": run.plan.run_id,
        "attempt": run.plan.attempt,
        "supervisor_pid": me,
        "supervisor_start_ticks": _SELF[0],
        "launcher": True,
        "pid": run.pid,
        "pid_start_ticks": files.proc_start_ticks(run.pid),
        "started_at": run.started_at.isoformat(),
        "boot_id": _SELF[1],
        "cgroup": run.plan.cgroup,
    }


def _append_live(run: _Run, data: bytes) -> None:
    """The live output file, opened at the first output and bounded as the supervisor's."""
    room = files.live_limit(run.plan.limit_bytes) - (run.total - len(data))
    if room <= 0:
        return
    try:
        if run.live is None:
            run.live = files.open_new(
                files.live_path(run.plan.state_dir, run.plan.run_id, run.plan.attempt), os.O_APPEND
            )
        os.write(run.live, data[:room])
        if room <= len(data):
            os.close(run.live)
            run.live = None
    except OSError:
        pass


def _write(path: str, data: bytes) -> None:
    fd = files.open_new(path)
    try:
        files.write_all(fd, data)
    finally:
        os.close(fd)


def _sync_fs(directory: str) -> None:
    """Flush the file system that holds `directory` (one call for a whole batch)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_files(todo: queue.SimpleQueue[Any], launched_at: list[float]) -> None:
    """The remover thread: the files of each recorded run, or one file of `started`
    records, until a None arrives; each once no launch came for REMOVE_WHEN_QUIET_S.

    On a file system without a journal (ext4 made so), a new file skips every inode freed
    in the last seconds, reading each one's block to see when: removing a burst's files
    while the burst is still creating others made each new file cost more than the run's
    spawn. Left until the burst is over, they are freed behind it."""
    while (item := todo.get()) is not None:
        while (wait := launched_at[0] + REMOVE_WHEN_QUIET_S - time.monotonic()) > 0:
            time.sleep(wait)
        if len(item) == 1:
            try:
                _unlink(item[0])
            except OSError:
                pass  # the next daemon removes the records of a launcher that is gone
            continue
        state_dir, run_id, attempt = item
        for path in (
            files.path_of(state_dir, run_id, attempt, files.RESULT),
            files.path_of(state_dir, run_id, attempt, files.STARTED),
            files.live_path(state_dir, run_id, attempt),
        ):
            try:
                _unlink(path)
            except OSError:
                pass  # left for the next daemon, which finds the run recorded and removes them


def _unlink(path: str) -> None:
    """Remove `path` if it is there. Most paths asked for are not (a stale result, a live
    file of a job that printed nothing): an unlink locks the directory against every
    other change even to find nothing, a look does not."""
    if not os.path.lexists(path):
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _stop(run: _Run, sig: int) -> None:
    """`sig` to the job's group and every other process of its run (contain.stop_run)."""
    contain.stop_run(run.plan.cgroup, run.plan.env.get(contain.TAG, ""), run.pid, sig)


_SELF: tuple[int | None, str] = (None, "")


def serve(fd: int) -> None:
    """The launcher's main: the daemon's socket is `fd`; returns when everything is done."""
    global _SELF
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # the daemon decides; we follow its socket
    os.chdir("/")
    os.closerange(fd + 1, _MAX_FD)  # whatever the daemon let us inherit is not the jobs' business
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    _SELF = (files.proc_start_ticks(os.getpid()), files.boot_id())
    ctl = socket.socket(fileno=fd)
    ctl.set_inheritable(False)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address(os.getpid(), _SELF[0]))
    listener.listen(64)
    listener.setblocking(False)
    contain.become_subreaper()  # the jobs' orphans become ours: reaped, and killed with their run
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    Loop(ctl, listener, wake_r).serve()


def address(pid: int, ticks: int | None) -> str:
    """The abstract socket a launcher listens on, unique to that very process."""
    return f"\0chrono-launcher.{pid}.{ticks}"
