"""Hand crontab lines from cron to chronod (`import --cutover`) and back (`--rollback`),
so that every occurrence is run by exactly one of them.

How the two daemons pick up a change decides the protocol (docs/import.md has the long
version):

* Debian cron wakes about one second after each minute boundary, checks the modification
  times of /etc/crontab, /etc/cron.d and its spool, re-reads what changed, and only then
  runs that minute's jobs. A crontab replaced during minute M is therefore still in force
  for M (already run at M:00) and gone from M+1 on.
* chronod, when it loads a new job, stores as its first occurrence the first fire time
  strictly after the moment of loading (`Daemon.next_run(job, now)`); imported jobs have
  `tolerance_s: 0`, so no jitter moves that fire time. Loaded during minute M, a
  minutely job first runs at M+1.

So both changes are made inside one minute M, never near its boundaries: not before
second 5 (cron may still be reading its files for M), and done before second 55. The side
that starts goes first and is confirmed (cutover: chronod carries the jobs, then the
crontab lines are commented out; rollback: the crontab is restored, then chronod drops
the jobs), so there is no moment at which neither daemon has a job.

The pure part (the window, the file names, the rewrite) takes time and text as arguments;
`cutover` and `rollback` are the I/O edge.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from chronoctl.errors import EXIT_NO, EXIT_UNREACHABLE, CliError
from chronod import fsutil

MARKER = "# chrono: migrated to "
BACKUP_SUFFIX = ".chrono-backup"
WINDOW_OPEN_S = 5
"""A switch starts no earlier than this second of a minute (cron reads its files just after :00)."""
WINDOW_CLOSE_S = 45
"""...and no later than this one, so it has ten seconds to finish."""
DEADLINE_S = 55
"""Every change of a switch lands before this second of the minute it started in."""

_MARKER_LINE = re.compile(rb"^# chrono: migrated to (\S+)\r?$")


# --- the pure part ----------------------------------------------------------------------


def minute_of(at: datetime) -> datetime:
    """The start of the minute `at` falls in."""
    return at.replace(second=0, microsecond=0)


def switch_start(now: datetime) -> datetime:
    """When a switch may begin: `now` if it lies between second WINDOW_OPEN_S and
    WINDOW_CLOSE_S of its minute, else the next such moment."""
    minute = minute_of(now)
    into = (now - minute).total_seconds()
    if WINDOW_OPEN_S <= into < WINDOW_CLOSE_S:
        return now
    if into < WINDOW_OPEN_S:
        return minute + timedelta(seconds=WINDOW_OPEN_S)
    return minute + timedelta(minutes=1, seconds=WINDOW_OPEN_S)


def switch_deadline(minute: datetime) -> datetime:
    """The moment by which a switch begun in `minute` must have made its last change."""
    return minute + timedelta(seconds=DEADLINE_S)


def backup_path(crontab: Path) -> Path:
    """Where the cutover keeps the original crontab and the rollback finds it.

    Beside the file, so that the rename back is atomic. cron must never read the backup:
    names with a dot are skipped in /etc/cron.d, /etc is not read at all, and in the
    spool (`.../crontabs/USER`) a dotfile is skipped where `USER.chrono-backup` would be
    looked up as a user.
    """
    if crontab.parent.name == "crontabs":
        return crontab.with_name(f".{crontab.name}{BACKUP_SUFFIX}")
    return crontab.with_name(crontab.name + BACKUP_SUFFIX)


def comment_out(data: bytes, migrated: dict[int, str]) -> bytes:
    """`data` with each line number in `migrated` replaced by `# chrono: migrated to <id>`
    and the original line behind a `#`. Bytes in, bytes out: every other byte is kept,
    line endings (CRLF, a missing final newline) included."""
    lines = data.split(b"\n")
    for number, job_id in migrated.items():
        raw = lines[number - 1]
        cr = b"\r" if raw.endswith(b"\r") else b""
        lines[number - 1] = (MARKER + job_id).encode() + cr + b"\n#" + raw
    return b"\n".join(lines)


def migrated_ids(data: bytes) -> list[str]:
    """The job ids named by cutover markers in a crontab, in file order."""
    return [m.group(1).decode() for line in data.split(b"\n") if (m := _MARKER_LINE.match(line))]


def registry_header(source: str) -> str:
    """The first line `chronoctl import` writes into a registry file made from `source`."""
    return f"# Imported from {source} by `chronoctl import`."


# --- files --------------------------------------------------------------------------------


def replace_file(target: Path, data: bytes, like: os.stat_result) -> os.stat_result:
    """Atomically replace `target` with `data`, owned and moded as `like` (see
    fsutil.write_atomically). Returns the new file's status (its mtime is when cron can
    notice it)."""
    return fsutil.write_atomically(target, data, mode=like.st_mode & 0o7777, owner=(like.st_uid, like.st_gid))


def _remove(path: Path) -> None:
    fsutil.remove_durably(path, missing_ok=True)


def imported_files(registry: Path, source: str) -> list[Path]:
    """Registry files that `chronoctl import` wrote from `source` (by their header line)."""
    if not registry.is_dir():
        return []
    header = registry_header(source).encode()
    out = []
    for f in sorted(registry.glob("imported-*.y*ml")):
        try:
            with open(f, "rb") as fh:
                first = fh.readline().rstrip(b"\r\n")
        except OSError:
            continue
        if first == header:
            out.append(f)
    return out


# --- the daemon -----------------------------------------------------------------------------


@dataclass
class Daemon:
    """The chronod on this host as seen through the store."""

    store: Any
    node: Any  # chronod.store.api.Node

    def ask_reload(self) -> None:
        """Queue a reload request and SIGHUP the daemon."""
        from chronoctl import cmd_ops

        self.store.add_request("reload", None, {"requested_at": datetime.now(timezone.utc).isoformat()})
        cmd_ops.wake(self.node, cmd_ops.SIG_RELOAD)

    def loaded_at(self) -> str | None:
        """When the daemon last loaded its registry (from its node record)."""
        for n in self.store.nodes():
            if n.name == self.node.name and n.token == self.node.token:
                return (n.info or {}).get("registry_loaded_at")
        return None

    def key(self, spec: Any) -> str:
        from chronod.core.occurrence import placement

        return placement(spec, self.node.name).key

    def first_occurrences(self, specs: list[Any]) -> dict[str, datetime] | None:
        """Each job's stored next occurrence, once the daemon carries exactly these specs;
        None while it does not yet. @reboot and disabled jobs have no occurrence."""
        firsts: dict[str, datetime] = {}
        waiting = [s for s in specs if s.enabled and s.schedule != "@reboot"]
        for spec in specs:
            row = self.store.get_job(spec.id)
            if row is None or row.removed_at is not None or row.spec_hash != spec.spec_hash():
                return None
        pending = self.store.pending([self.key(s) for s in waiting]) if waiting else []
        by_key = {r.job_key: r for r in pending if r.trigger == "schedule" and r.state == "pending"}
        for spec in waiting:
            run = by_key.get(self.key(spec))
            if run is None:
                return None
            firsts[spec.id] = run.scheduled_at
        return firsts

    def dropped(self, job_ids: list[str]) -> bool:
        """Whether the daemon no longer carries any of `job_ids`."""
        for job_id in job_ids:
            row = self.store.get_job(job_id)
            if row is not None and row.removed_at is None:
                return False
        return True


def find_daemon(store: Any) -> Daemon | None:
    """The live chronod on this host, or None."""
    from chronoctl import cmd_ops

    node = cmd_ops.local_daemon(store, datetime.now(timezone.utc))
    return Daemon(store, node) if node is not None else None


def ping(daemon: Daemon, timeout_s: float = 10.0) -> float:
    """Ask for a reload and wait until the daemon's registry_loaded_at moves: proof that
    it reacts. Returns the seconds it took; CliError (exit 3) when it does not answer."""
    from chronoctl import cmd_ops

    before = daemon.loaded_at()
    started = time.monotonic()
    daemon.ask_reload()
    if not cmd_ops.wait_for(lambda: daemon.loaded_at() != before, timeout_s, 0.05):
        raise CliError(
            f"chronod (node {daemon.node.name}, pid {daemon.node.pid}) did not answer a reload "
            f"within {timeout_s:.0f} s; the crontab was not changed",
            "check chronod's log (journalctl -u chronod), then run the command again",
            EXIT_UNREACHABLE,
        )
    return time.monotonic() - started


# --- cutover ---------------------------------------------------------------------------------


@dataclass
class Migration:
    """One crontab to hand over: its bytes as read, the lines that became jobs, and the
    registry file that carries them."""

    crontab: Path
    data: bytes
    lines: dict[int, str]  # line number -> job id
    registry_file: Path
    registry_text: str
    specs: list[Any] = field(default_factory=list)
    previous: bytes | None = None  # the registry file before this cutover, if any


@dataclass
class Switch:
    """What happened during one switch, for the report."""

    started_at: datetime
    minute: datetime
    confirmed_at: datetime | None = None
    switched_at: datetime | None = None  # the crontab's new mtime: when cron can see the change
    firsts: dict[str, datetime] = field(default_factory=dict)
    done_at: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        def iso(t: datetime | None) -> str | None:
            return t.isoformat() if t else None

        return {
            "started_at": iso(self.started_at),
            "minute": iso(self.minute),
            "confirmed_at": iso(self.confirmed_at),
            "switched_at": iso(self.switched_at),
            "done_at": iso(self.done_at),
            "second_of_minute": round((self.switched_at - self.minute).total_seconds(), 3)
            if self.switched_at
            else None,
            "confirm_s": round((self.confirmed_at - self.started_at).total_seconds(), 3) if self.confirmed_at else None,
            "chrono_first": {k: iso(v) for k, v in sorted(self.firsts.items())},
        }


Clock = Callable[[], datetime]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _sleep_until(at: datetime, clock: Clock) -> None:
    while True:
        left = (at - clock()).total_seconds()
        if left <= 0:
            return
        time.sleep(min(left, 0.5))


def specs_of(text: str, name: str) -> list[Any]:
    """The job specs chronod will build from a registry file's text (refuses errors)."""
    from chronod.core.validate import validate_document
    from chronod.specfile import parse_text

    result = validate_document(parse_text(text, name), now=_now())
    errors = [p for p in result.problems if p.severity == "error"]
    if errors:
        raise CliError(
            f"{name}: the imported jobs do not validate: {errors[0].format()}",
            "report this as a bug of chronoctl import; the crontab was not changed",
        )
    return list(result.jobs)


def cutover(migrations: list[Migration], daemon: Daemon, clock: Clock = _now) -> Switch:
    """Register the jobs, confirm chronod carries them with first occurrences after the
    switch minute, then comment their lines out of the crontabs (backups kept), all
    inside one minute's window. Undoes the registration and raises when any step misses
    the deadline or a crontab changed meanwhile."""
    for m in migrations:
        for spec in m.specs:
            if spec.schedule == "@reboot":
                _mark_reboot_done(daemon, spec)
    start = switch_start(clock())
    _sleep_until(start, clock)
    now = clock()
    if switch_start(now) != now:  # overslept past second WINDOW_CLOSE_S (a suspended host)
        start = switch_start(now)
        _sleep_until(start, clock)
    sw = Switch(started_at=clock(), minute=minute_of(clock()))
    for m in migrations:
        if m.crontab.read_bytes() != m.data:
            raise CliError(
                f"{m.crontab} changed while the cutover was being prepared; nothing was changed",
                "run the command again",
            )
    for m in migrations:
        m.previous = m.registry_file.read_bytes() if m.registry_file.exists() else None
    try:
        return _switch(migrations, daemon, sw, clock)
    except KeyboardInterrupt:
        if all(m.crontab.read_bytes() == m.data for m in migrations):
            _undo_registration(migrations, daemon, clock)  # interrupted before cron was told
        raise


def _switch(migrations: list[Migration], daemon: Daemon, sw: Switch, clock: Clock) -> Switch:
    deadline = switch_deadline(sw.minute)
    for m in migrations:
        write_registry_file(m.registry_file, m.registry_text.encode(), private=others_may_not_read(m.crontab))
    daemon.ask_reload()
    specs = [s for m in migrations for s in m.specs]
    firsts = _wait_until(lambda: daemon.first_occurrences(specs), deadline, clock)
    if firsts is None or clock() >= deadline:
        _undo_registration(migrations, daemon, clock)
        raise CliError(
            f"chronod did not confirm the jobs before second {DEADLINE_S} of the minute; "
            "the registry files were put back and no crontab was changed",
            f"check that chronod reads {migrations[0].registry_file.parent} (--registry) and its log "
            "for registry errors, then run the command again",
            EXIT_NO,
        )
    sw.confirmed_at = clock()
    early = {i: t for i, t in firsts.items() if t <= sw.minute}
    if early:
        _undo_registration(migrations, daemon, clock)
        raise CliError(
            f"chronod would also run {', '.join(sorted(early))} at {sw.minute:%H:%M} UTC, a minute cron "
            "already ran; the registry files were put back and no crontab was changed",
            "cut over jobs imported with cron's behaviour (tolerance_s: 0), without --adopt-defaults",
        )
    sw.firsts = firsts
    changed = [m.crontab for m in migrations if m.crontab.read_bytes() != m.data]
    if changed:
        _undo_registration(migrations, daemon, clock)
        raise CliError(
            f"{changed[0]} changed during the cutover; the registry files were put back and no crontab was changed",
            "run the command again",
        )
    for m in migrations:
        st = os.stat(m.crontab)
        backup = backup_path(m.crontab)
        if not backup.exists():
            replace_file(backup, m.data, st)
        new = replace_file(m.crontab, comment_out(m.data, m.lines), st)
        at = datetime.fromtimestamp(new.st_mtime, timezone.utc)
        sw.switched_at = max(sw.switched_at or at, at)
    sw.done_at = clock()
    return sw


def write_registry_file(path: Path, data: bytes, *, restore: bool = False, private: bool = False) -> None:
    """Put `data` into the registry at `path` as the daemon's checks want it (a new file
    0644 and root-owned when we are root, 0600 when it is `private`: made from a file that
    others may not read, whose `env:` lines stay theirs alone; an existing one keeping its
    owner and mode; atomic and durable), creating the registry directory (0755). `restore`
    puts back what was there before, as it was, without judging it again."""
    from chronoctl.cmd_registry import write_atomically

    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    write_atomically(path, data, check=not restore, mode=0o600 if private else 0o644)


def others_may_not_read(source: str | Path) -> bool:
    """Whether a crontab is one that others may not read (a user's spool file is 0600, and
    its environment lines often hold secrets); False for standard input."""
    try:
        return not os.stat(source).st_mode & 0o004
    except OSError:
        return False


def _undo_registration(migrations: list[Migration], daemon: Daemon, clock: Clock) -> None:
    for m in migrations:
        if m.previous is None:
            _remove(m.registry_file)
        else:
            write_registry_file(m.registry_file, m.previous, restore=True)
    daemon.ask_reload()
    ids = [s.id for m in migrations if m.previous is None for s in m.specs]
    _wait_until(lambda: daemon.dropped(ids), clock() + timedelta(seconds=10), clock)


def _wait_until(check: Callable[[], Any], deadline: datetime, clock: Clock) -> Any:
    while True:
        value = check()
        if value or clock() >= deadline:
            return value
        time.sleep(0.05)


def _mark_reboot_done(daemon: Daemon, spec: Any) -> None:
    """cron already ran this @reboot job for the current boot: record that, so that a
    chronod restarted later in this boot does not run it a second time."""
    key = daemon.key(spec)
    state = daemon.store.get_job_state(key)
    daemon.store.set_job_state(key, {**state, "boot_id": fsutil.boot_id()})


# --- rollback ---------------------------------------------------------------------------------


@dataclass
class RollbackPlan:
    """What `--rollback FILE` has to do, decided from the files before anything changes."""

    crontab: Path
    backup: Path
    restore: bytes | None  # the backup's bytes, when the crontab still has migrated lines
    registry_files: list[Path]
    job_ids: list[str]
    drop_backup: bool

    @property
    def nothing_to_do(self) -> bool:
        return self.restore is None and not self.registry_files and not self.drop_backup


def plan_rollback(crontab: Path, registry: Path) -> RollbackPlan:
    """Read the crontab, its backup and the registry, and decide the rollback steps.
    Each step is checked against what is already done, so a second run does nothing."""
    import yaml

    backup = backup_path(crontab)
    data = crontab.read_bytes() if crontab.exists() else None
    saved = backup.read_bytes() if backup.exists() else None
    marked = migrated_ids(data) if data is not None else []
    files = imported_files(registry, str(crontab))
    ids: list[str] = list(marked)
    for f in files:
        try:
            doc = yaml.safe_load(f.read_bytes()) or {}
        except (OSError, yaml.YAMLError):
            doc = {}
        ids += [j["id"] for j in doc.get("jobs") or [] if isinstance(j, dict) and isinstance(j.get("id"), str)]
    ids = list(dict.fromkeys(ids))
    if marked and saved is None:
        raise CliError(
            f"{crontab} has lines migrated to chrono but its backup {backup} is missing",
            f"uncomment the lines after each '{MARKER.strip()}' marker by hand, then remove "
            f"{', '.join(map(str, files)) or 'the imported registry file'}",
        )
    if saved is not None and not marked and data != saved:
        raise CliError(
            f"{backup} exists but {crontab} has no migrated lines and differs from it",
            f"compare the two files; remove {backup} once {crontab} is what cron should run",
        )
    return RollbackPlan(crontab, backup, saved if marked else None, files, ids, saved is not None)


def rollback(plan: RollbackPlan, daemon: Daemon | None, clock: Clock = _now) -> Switch:
    """Restore the crontab, then take the jobs out of the registry and confirm chronod
    dropped them, inside one minute's window (no window is needed without a daemon)."""
    if daemon is not None and (plan.restore is not None or plan.registry_files):
        _sleep_until(switch_start(clock()), clock)
    sw = Switch(started_at=clock(), minute=minute_of(clock()))
    deadline = switch_deadline(sw.minute)
    if plan.restore is not None:
        new = replace_file(plan.crontab, plan.restore, os.stat(plan.backup))
        sw.switched_at = datetime.fromtimestamp(new.st_mtime, timezone.utc)
    for f in plan.registry_files:
        _remove(f)
    if daemon is not None and plan.registry_files:
        daemon.ask_reload()
        if not _wait_until(lambda: daemon.dropped(plan.job_ids), deadline, clock):
            raise CliError(
                f"chronod has not confirmed that it dropped {', '.join(plan.job_ids)} before second "
                f"{DEADLINE_S}; it may run them at {sw.minute + timedelta(minutes=1):%H:%M} UTC as well "
                "as cron. The crontab is restored and the registry files are removed",
                "check `chronoctl list` and chronod's log; it drops the jobs on its next reload",
            )
        sw.confirmed_at = clock()
    if plan.drop_backup:
        _remove(plan.backup)
    sw.done_at = clock()
    return sw
