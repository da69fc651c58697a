"""A run's output for `chronoctl logs`: the stored tail of any attempt, what a running
attempt has printed so far, and following it until the run ends.

A running attempt's output is in the live file its supervisor appends to, in the state
directory of the daemon that runs it (the daemon publishes where that is; the file's name
comes from `chronod.paths.live_output`). It is readable on that daemon's host, by its
user. Once an attempt ends, its tail is in the database (every attempt keeps its own).
"""

from __future__ import annotations

import codecs
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chronoctl.errors import CliError, UsageError
from chronoctl.pauses import pause

if TYPE_CHECKING:
    from chronod.store.api import Run, Store

POLL_S = 0.2
WAITING = ("pending", "retry_wait")


def attempt_number(run: "Run", attempt: int | None) -> int:
    """`attempt` checked against the run (1..its attempts), or the run's latest attempt."""
    if attempt is None:
        return run.attempts
    if not 1 <= attempt <= max(run.attempts, 0):
        have = f"{run.attempts} attempt(s)" if run.attempts else "no attempt yet"
        raise UsageError(
            f"--attempt {attempt}: run {run.run_id} has {have}",
            f"give --attempt 1 to {run.attempts}" if run.attempts else None,
        )
    return attempt


def stored(store: "Store", run: "Run", attempt: int) -> tuple[str | None, int]:
    """(tail, bytes printed in all) of a finished attempt; tail None when it was not kept."""
    if attempt == run.attempts and run.state not in ("running",):
        return run.output_tail, run.output_bytes
    row = next((a for a in store.attempts(run.run_id) if a.attempt == attempt), None)
    if row is None or row.output_tail is None:
        return None, 0
    return row.output_tail, row.output_bytes or 0


def _this_host() -> set[str]:
    name = socket.gethostname()
    return {name, name.split(".")[0]}


def live_file(store: "Store", run: "Run", attempt: int, db: str) -> Path:
    """The live output file of a running attempt; CliError when it is not on this host."""
    from chronod.paths import default_state_dir, live_output

    node = next((n for n in store.nodes() if n.name == run.node), None)
    if node is not None and node.hostname not in _this_host():
        raise CliError(
            f"run {run.run_id} is running on node {node.name} (host {node.hostname}); "
            "its output so far can be read only there",
            f"run `chronoctl logs {run.run_id[:8]}` on {node.hostname}, or wait for it to end",
        )
    state_dir = (node.info or {}).get("state_dir") if node is not None else None
    if not state_dir:
        state_dir = default_state_dir(db)
    return live_output(state_dir, run.run_id, attempt)


def read_live(path: Path, offset: int = 0) -> bytes:
    """The bytes of the live file from `offset` (empty when it is not there yet or any more)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""
    except PermissionError as exc:
        raise CliError(
            f"cannot read {path}: the output of a running run is readable by the daemon's user only",
            "run chronoctl as the user chronod runs as (or wait for the run to end)",
        ) from exc


def missing_part(tail: str | None, total: int, shown: int) -> tuple[str, int]:
    """What of an attempt's stored tail was not shown yet, given `shown` of its `total`
    bytes were; and how many bytes in between are lost (the live file stops at its bound)."""
    if not tail or total <= shown:
        return "", 0
    data = tail.encode("utf-8", "surrogateescape")
    missing = total - shown
    if missing <= len(data):
        return data[-missing:].decode("utf-8", "backslashreplace"), 0
    return tail, missing - len(data)


def outcome_line(run: "Run") -> str:
    """`run 1a2b3c4d succeeded after 1 attempt in 3s` or `... failed after 2 attempts: exit code 1`."""
    from chronoctl import cmd_ops
    from chronoctl.render import age

    took = cmd_ops.duration_s(run)
    tries = f" after {run.attempts} attempt{'s' if run.attempts != 1 else ''}" if run.attempts else ""
    during = f" in {age(took)}" if took is not None else ""
    why = f": {run.error}" if run.error and run.state != "succeeded" else ""
    return f"run {run.run_id[:8]} of {run.job_id} {run.state}{tries}{during}{why}"


class Follower:
    """Streams a run's output to stdout as it is printed, attempt after attempt, until the run ends."""

    def __init__(self, store: "Store", run: "Run", db: str):
        self.store, self.run, self.db = store, run, db
        self.attempt = 0  # the attempt being streamed (0: none yet)
        self.shown = 0  # bytes of it shown
        self.decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
        self.said: set[str] = set()

    def follow(self) -> int:
        """Stream until the run reaches a final state; 0 when it succeeded, 1 otherwise."""
        from chronod.core.model import TERMINAL_STATES

        first = True
        while True:
            run = self.store.get_run(self.run.run_id)
            if run is None:
                raise CliError(f"run {self.run.run_id} disappeared from the database")
            self.run = run
            if self.attempt and (run.attempts > self.attempt or run.state != "running"):
                self._finish_attempt()
            if first and run.state in TERMINAL_STATES and run.attempts:
                self.attempt = run.attempts  # it ended already: its stored tail, then the outcome
                self._finish_attempt()
            first = False
            if run.state in TERMINAL_STATES:
                _note(outcome_line(run))
                return 0 if run.state == "succeeded" else 1
            if run.state == "running":
                if run.attempts != self.attempt:
                    self._start_attempt(run.attempts)
                self._emit(read_live(live_file(self.store, run, self.attempt, self.db), self.shown))
            else:
                self._waiting(run)
            pause(POLL_S)

    def _start_attempt(self, attempt: int) -> None:
        self.attempt, self.shown = attempt, 0
        self.decoder.reset()
        if attempt > 1:
            _note(f"attempt {attempt} started")

    def _emit(self, data: bytes) -> None:
        if not data:
            return
        from chronoctl.render import escape_control

        self.shown += len(data)
        sys.stdout.write(escape_control(self.decoder.decode(data)))
        sys.stdout.flush()

    def _finish_attempt(self) -> None:
        """Show what of the attempt that just ended the live file did not (its last bytes)."""
        from chronoctl.render import escape_control

        self._emit(
            read_live(live_file(self.store, self.run, self.attempt, self.db), self.shown)
            if self.run.state == "running" and self.run.attempts == self.attempt
            else b""
        )
        tail, total = stored(self.store, self.run, self.attempt)
        rest, lost = missing_part(tail, total, self.shown)
        if lost:
            _note(f"{lost} bytes of attempt {self.attempt}'s output were not kept")
        if rest:
            sys.stdout.write(escape_control(rest))
        sys.stdout.flush()
        self.attempt, self.shown = 0, 0

    def _waiting(self, run: "Run") -> None:
        from chronoctl.render import human_time

        key = f"{run.state}:{run.attempts}"
        if key in self.said:
            return
        self.said.add(key)
        if run.state == "retry_wait" and run.next_attempt_at is not None:
            _note(
                f"attempt {run.attempts} ended ({run.error or run.state}); the next one starts "
                f"{human_time(run.next_attempt_at)}"
            )
        elif run.state == "pending":
            _note(f"run {run.run_id[:8]} has not started yet; it fires {human_time(run.fire_at)}")


def _note(text: str) -> None:
    from chronoctl.render import escape_line

    sys.stdout.flush()
    sys.stderr.write(f"chronoctl: {escape_line(text)}\n")
    sys.stderr.flush()


def show(store: "Store", run: "Run", attempt: int | None, db: str) -> tuple[str, str | None]:
    """(the output to print, a note for stderr) of one attempt of `run`: stored when it
    ended, read from its live file while it runs."""
    n = attempt_number(run, attempt)
    if n == 0:
        return "", _never_started(run)
    if run.state == "running" and n == run.attempts:
        data = read_live(live_file(store, run, n, db))
        if data or store.get_run(run.run_id).state == "running":  # type: ignore[union-attr]
            return data.decode("utf-8", "backslashreplace"), f"run {run.run_id[:8]} is still running: its output so far"
        run = store.get_run(run.run_id) or run  # it ended between the two reads
    tail, total = stored(store, run, n)
    if tail is None:
        return "", (
            f"attempt {n} of run {run.run_id} has no stored output (recorded before chrono kept every attempt's output)"
        )
    kept = len(tail.encode("utf-8", "surrogateescape"))
    note = f"showing the last {kept} of {total} bytes of output" if total > kept else None
    return tail, note


def _never_started(run: "Run") -> str:
    """Why a run without an attempt has no output: not yet, or never (it was skipped)."""
    from chronod.core.model import ACTIVE_STATES

    if run.state in ACTIVE_STATES:
        return f"run {run.run_id} has not started yet"
    from chronoctl.render import escape_line

    why = f" ({escape_line(run.error)})" if run.error else ""  # a window's reason comes from a job file
    return f"run {run.run_id} never started: it was {run.state}{why}, so it has no output"


def json_of(store: "Store", run: "Run", attempt: int | None, db: str) -> dict[str, Any]:
    """The `--json` of `logs`: the run, the attempt shown, its header and its output."""
    from chronoctl import cmd_ops

    text, _ = show(store, run, attempt, db)
    h = header(store, run, attempt)
    return dict(
        cmd_ops.run_json(run),
        attempt_shown=attempt_number(run, attempt),
        output_tail=text,
        running=run.state == "running",
        header={
            "run_id": h.run_id,
            "job_id": h.job_id,
            "scheduled_at": cmd_ops.iso(h.scheduled_at),
            "attempt": h.attempt,
            "attempts_max": h.attempts_max,
            "node": h.node,
            "state": h.state,
            "exit_code": h.exit_code,
            "signal": h.signal,
            "duration_s": h.duration_s,
            "killed_by": h.killed_by,
        },
    )


STARTED = ("running", "retry_wait")


def current_run(store: "Store", job_id: str, after: "Run | None" = None) -> "Run | None":
    """The job's running run, else its latest run that started (skipped runs never did);
    with `after`, only a run that started after that one (the next one to follow)."""
    found = store.runs(job_id, limit=50)
    running = [r for r in found if r.state in STARTED and r.started_at is not None]
    started = running or [r for r in found if r.started_at is not None]
    if after is not None:
        started = [
            r
            for r in started
            if r.run_id != after.run_id
            and r.started_at is not None
            and r.started_at >= (after.started_at or r.started_at)
        ]
    return max(started, key=lambda r: r.started_at) if started else None  # type: ignore[arg-type,return-value]


def header(store: "Store", run: "Run", attempt: int | None) -> Any:
    """`chronod.core.history.RunHeader` of the attempt shown (an earlier one from its own row)."""
    from chronod.core.history import run_header

    row = store.get_job(run.job_id)
    n = attempt if attempt is not None and attempt != run.attempts else None
    h = run_header(run, row.spec if row is not None else None, n)
    if n is None:
        return h
    tried = next((a for a in store.attempts(run.run_id) if a.attempt == n), None)
    if tried is None:
        return h
    import dataclasses

    return dataclasses.replace(
        h,
        state=tried.state or h.state,
        exit_code=tried.exit_code,
        signal=None,
        started_at=tried.started_at,
        finished_at=tried.finished_at,
        killed_by=None,
    )


def header_lines(h: Any) -> list[str]:
    """The header in words, two lines of at most 80 columns."""
    from chronoctl.render import age, short_time

    tries = f"attempt {h.attempt} of {h.attempts_max}" if h.attempt else "no attempt"
    node = f" on {h.node}" if h.node else ""
    first = f"run {h.run_id[:8]} of {h.job_id}, scheduled {short_time(h.scheduled_at)}, {tries}{node}"
    how = h.state
    if h.exit_code is not None and h.state != "running":
        how += f", exit code {h.exit_code}"
    if h.signal is not None:
        how += f", signal {h.signal}"
    if h.duration_s is not None:
        how += f", took {age(h.duration_s)}"
    elif h.started_at is not None and h.state == "running":
        how += f" since {short_time(h.started_at)}"
    if h.killed_by == "timeout":
        how += f": killed by its timeout ({h.timeout_s}s)" if h.timeout_s else ": killed by its timeout"
    elif h.killed_by == "replace":
        how += ": killed by overlap: replace (a newer run took its place)"
    elif h.killed_by == "operator":
        how += ": killed by an operator"
    return [first, how]


def print_header(store: "Store", run: "Run", attempt: int | None) -> None:
    """The header, on stderr (stdout keeps only the output, for pipes and files)."""
    from chronoctl.render import escape_line

    sys.stdout.flush()
    for line in header_lines(header(store, run, attempt)):
        sys.stderr.write(f"-- {escape_line(line)}\n")
    sys.stderr.flush()


def follow_job(store: "Store", job: Any, run: "Run | None", db: str) -> int:
    """`logs -f JOB`, like `journalctl -f`: the running run (else the latest that started),
    then each next run as it starts, a header before each, until interrupted (Ctrl-C)."""
    done: "Run | None" = None
    while True:
        run = run or _next_run(store, job.job_id, done)
        print_header(store, run, None)
        Follower(store, run, db).follow()
        done, run = run, None


def _next_run(store: "Store", job_id: str, done: "Run | None") -> "Run":
    """Wait for the job's next run to start (the first one, when `done` is None)."""
    _note(f"waiting for the next run of {job_id} (Ctrl-C to stop)")
    while True:
        run = current_run(store, job_id, after=done) if done is not None else current_run(store, job_id)
        if run is not None:
            return run
        pause(POLL_S)
