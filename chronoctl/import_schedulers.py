"""Timers and anacrontabs into the same result as crontabs: jobs with their source, notes and
verdict, registry files, errors. `cmd_import` prints and writes them the same way.

A job's verdict is `equivalence`: `compared` says against what (`systemd-analyze`, the
calendar engine's fixture, anacron's rules), `differences` how many reasons make chrono fire
it at other instants than its source scheduler, listed in `why`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from chronoctl.anacrontab import anacron_job, parse_anacrontab
from chronoctl.import_timers import TimerSource, import_timer, live_check
from chronoctl.importer import ImportOptions, registry_yaml, slugify
from chronoctl.limits import read_bounded
from chronoctl.systemd_timer import UnitError, instance_of

ANACRON_SPOOL = Path("/var/spool/anacron")


@dataclass(frozen=True)
class SourceLine:
    """Where a job came from, for the registry file's comments."""

    file: str
    line: int
    text: str


def _unique(base: str, used: set[str]) -> str:
    candidate, n = base, 1
    while candidate in used:
        n += 1
        candidate = f"{base}-{n}"
    used.add(candidate)
    return candidate


def _same(why: list[str]) -> dict[str, Any]:
    return {"same": True, "why": why}


def _equivalence(compared: str, differs: list[str]) -> dict[str, Any]:
    return {
        "compared": compared,
        "cron_starts": 0,
        "differences": len(differs),
        "why": differs,
        "environment": _same([]),
        "stdin": _same([]),
        "command": _same([]),
        "chrono_adds": ["CHRONO_JOB_ID, CHRONO_RUN_ID and the other CHRONO_* variables"],
    }


def registry_name(source: str, kind: str) -> str:
    stem = slugify(Path(source).name.replace("@", "-").removesuffix(".timer")) or kind
    return f"imported-{kind}-{stem}.yaml"


def import_timers(
    sources: list[TimerSource], options: ImportOptions, now: datetime, taken: set[str], result: Any
) -> None:
    """Each timer into `result` (cmd_import.ImportResult): a job, or an error saying why not."""
    from chronod.core.schedule import ScheduleError, compile_schedule

    used = set(taken)
    for src in sources:
        template, instance = instance_of(src.name)
        stem = src.name.removesuffix(".timer").replace("@", "-")
        job_id = _unique(slugify(stem) or "timer", used)
        label = str(src.path if src.path.name == src.name else src.path.with_name(src.name))
        try:
            tj = import_timer(src, job_id, options.host_timezone)
        except UnitError as exc:
            result.errors.append({"file": label, "line": 0, "message": str(exc), "hint": _timer_hint(str(exc))})
            used.discard(job_id)
            continue
        job = tj.job
        try:
            schedule = compile_schedule(job["schedule"], job["timezone"])
        except ScheduleError as exc:
            result.errors.append({"file": label, "line": 0, "message": f"{src.name}: {exc.message}", "hint": exc.hint})
            used.discard(job_id)
            continue
        differs = list(tj.differs)
        compared = "calendar engine (tests/fixtures/systemd_calendar)"
        if tj.calendar:
            live = live_check(tj.calendar, options.host_timezone, now, schedule.fires)
            if live is not None:
                compared = "systemd-analyze"
                differs += live
        else:
            compared = "systemd's timer rules"
        notes = tj.notes + [f"not honoured: {what}" for what in tj.not_honoured]
        job.update(
            source={"file": label, "line": 0}, notes=notes, would_change=[], equivalence=_equivalence(compared, differs)
        )
        result.jobs.append(job)
        spec = {k: v for k, v in job.items() if k not in ("source", "notes", "would_change", "equivalence")}
        text = registry_yaml(label, [(SourceLine(label, 0, f"{src.name}: " + "; ".join(tj.calendar)), spec)])
        result.files[registry_name(src.name, "systemd")] = text
        result.compared[job["id"]] = compared


def _timer_hint(message: str) -> str:
    if "template" in message:
        return "import an instance: chronoctl import /lib/systemd/system/NAME@INSTANCE.timer --dry-run"
    if "ExecStart" in message or "Type=" in message:
        return "keep this unit under systemd, or write the job by hand (chrono-jobs(5))"
    return "fix the unit (systemd-analyze verify NAME.timer), or keep it under systemd"


def timestamp(spool: Path, ident: str) -> date | None:
    """The date anacron last started a job (its spool file holds YYYYMMDD), or None."""
    try:
        text = read_bounded(spool / ident, f"anacron timestamp {spool / ident}").strip()
        return datetime.strptime(text[:8], "%Y%m%d").date()
    except (OSError, ValueError):
        return None


def import_anacrontab(
    path: str,
    text: str,
    options: ImportOptions,
    taken: set[str],
    result: Any,
    flavor: str = "debian",
    spool: Path = ANACRON_SPOOL,
) -> None:
    parsed = parse_anacrontab(text, path, flavor)
    for line, message, hint in parsed.errors:
        result.errors.append({"file": path, "line": line, "message": message, "hint": hint})
    used = set(taken)
    kept = []
    for entry in parsed.entries:
        job_id = _unique(slugify(f"anacron-{entry.ident}"), used)
        job, differs, notes = anacron_job(entry, job_id, options.host_timezone, timestamp(spool, entry.ident), flavor)
        job.update(
            source={"file": path, "line": entry.line},
            notes=notes,
            would_change=[],
            equivalence=_equivalence("anacron's rules", differs),
        )
        result.jobs.append(job)
        result.compared[job_id] = "anacron's rules"
        spec = {k: v for k, v in job.items() if k not in ("source", "notes", "would_change", "equivalence")}
        kept.append((SourceLine(path, entry.line, entry.text), spec))
    if kept:
        result.files[registry_name(path, "anacron")] = registry_yaml(path, kept)


def anacron_installed(root: str = "/") -> bool:
    return os.access(os.path.join(root, "usr/sbin/anacron"), os.X_OK)
