"""`show` and `edit`: one job as chrono sees it, and `crontab -e` for one job.

`edit` opens $VISUAL / $EDITOR on a copy of the job's file, validates the copy when the
editor exits, offers to edit again when it is invalid (an invalid file is never written),
then writes it through the registry's one writer (`cmd_registry.write_atomically`: the
file keeps its owner and mode, and an edit that the daemon would refuse in a file of that
owner is not written) and has the daemon reload, as `register` does. Both commands warn
of what the daemon refuses in the job's file.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from chronoctl import cmd_ops, cmd_registry, common
from chronoctl import complete as _complete
from chronoctl.cmd_ops import db_option, json_option
from chronoctl.errors import CliError, InvalidInput

if TYPE_CHECKING:
    from chronod.core.model import JobSpec


def register(app: typer.Typer) -> None:
    """Add `show` and `edit` to `app`."""
    app.command("show")(show)
    app.command("edit")(edit)


def _registry_option() -> Any:
    return typer.Option(None, "--registry", metavar="DIR", help=cmd_registry.REGISTRY_HELP)


# --- show -------------------------------------------------------------------------------


def show(
    job: str = typer.Argument(..., metavar="JOB", help="A job id.", autocompletion=_complete.job_ids),
    registry: Optional[Path] = _registry_option(),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """The job as chrono runs it: every field after defaults, its file and line, its
    jitter offset on each node, its resource and its notify routes."""
    now = common.now_utc()
    spec = common.find_job(common.registry_dir(registry), job, now)
    warn_refusals(spec)
    data = described(spec, _node_names(db, now))
    if as_json:
        from chronoctl.render import print_json

        return print_json(data)
    _print_show(data)


def warn_refusals(spec: "JobSpec") -> None:
    """Say on stderr what the daemon refuses in the job's file (a root daemon's file
    checks: owner, mode, links, delegation), so that what `show` prints is not taken
    for what runs."""
    from chronoctl.render import escape_line
    from chronod.specfile import refusals

    for p in refusals(spec.source_file, now=common.now_utc()):
        job = f" job {p.job_id}:" if p.job_id else ""
        where = f"{p.file}:{p.line}" if p.line else p.file
        sys.stderr.write(escape_line(f"chronoctl: warning: chronod refuses {where}:{job} {p.message}") + "\n")
        if p.hint:
            sys.stderr.write("  hint: " + escape_line(p.hint) + "\n")


def _node_names(db: str | None, now: datetime) -> list[str]:
    """The nodes of the database (for per-node jitter); this host alone without one."""
    from chronod.paths import default_node

    try:
        with cmd_ops.opened(db) as store:
            names = [n.name for n in store.nodes()]
    except CliError:
        names = []
    return names or [default_node()]


def described(spec: "JobSpec", nodes: list[str]) -> dict[str, Any]:
    """`show --json`: the effective spec, where it is defined, and its jitter per node."""
    from chronod.core.occurrence import placements

    fields = spec.to_json_dict()
    source = {"file": fields.pop("source_file"), "line": fields.pop("source_line")}
    return {
        "job_id": spec.id,
        "source": source,
        "spec": fields,
        "jitter": [{"node": p.node, "job_key": p.key, "offset_s": p.offset_s} for p in placements(spec, nodes)],
        "resource": spec.resource,
        "notify": fields["notify"],
    }


def _print_show(d: dict[str, Any]) -> None:
    from chronoctl.render import echo, echo_wrapped, escape_line

    echo(escape_line(f"job {d['job_id']} ({d['source']['file']}:{d['source']['line']})"))
    for name, value in d["spec"].items():
        if name in ("id", "notify", "resource", "max_silence_explicit"):
            continue
        echo_wrapped(f"{name + ':':<20}{_text(value)}", "  ")
    echo("jitter:")
    for j in d["jitter"]:
        where = f"on {j['node']}" if j["node"] else "on every node"
        echo_wrapped(f"+{j['offset_s']}s {where} (key {j['job_key']})", "  ")
    echo(f"resource: {d['resource'] or 'none'}")
    echo("notify:" + ("" if d["notify"] else " nothing"))
    for n in d["notify"]:
        target = f"webhook {n['webhook']}" if n.get("webhook") else f"command {_text(n.get('command'))}"
        echo_wrapped(f"on {', '.join(n['on'])}: {target} (timeout {n['timeout_s']}s)", "  ")


def _text(value: Any) -> str:
    from chronoctl.render import escape_line

    if isinstance(value, (list, tuple)):
        return escape_line(" ".join(shlex.quote(str(v)) for v in value)) if value else "-"
    if isinstance(value, dict):
        return escape_line(", ".join(f"{k}={v}" for k, v in value.items())) if value else "-"
    return escape_line("-" if value is None or value == "" else value)


# --- edit -------------------------------------------------------------------------------


def edit(
    job: str = typer.Argument(..., metavar="JOB", help="A job id.", autocompletion=_complete.job_ids),
    registry: Optional[Path] = _registry_option(),
    db: Optional[str] = db_option(),
    wait: float = cmd_registry._wait_option(),
) -> None:
    """`crontab -e` for one job: edit a copy of its file with $VISUAL or $EDITOR, validate
    it on save (offering to edit again; an invalid file is never written), write it
    atomically and have the daemon reload."""
    now = common.now_utc()
    reg_dir = common.registry_dir(registry)
    spec = common.find_job(reg_dir, job, now)
    warn_refusals(spec)
    source = Path(spec.source_file)
    original = source.read_bytes()
    with tempfile.TemporaryDirectory(prefix="chronoctl-edit-") as tmp:
        copy = Path(tmp) / source.name
        copy.write_bytes(original)
        specs = _edit_until_valid(copy, reg_dir, source, now)
        if specs is None:
            return
        if source.read_bytes() != original:
            raise CliError(
                f"{source} changed while you were editing it; it was left as it is",
                f"your version is in {_keep(copy, source)}: merge it and run `chronoctl edit {job}` again",
            )
        cmd_registry.write_atomically(source, copy.read_bytes())
    hashes = {s.id: s.spec_hash() for s in specs}
    outcome = cmd_registry._reload_and_confirm(db, lambda store, now: cmd_registry._took(store, hashes), wait)
    cmd_registry._report("edited", source, _changed(original, source, specs, now), [], outcome, False)


def _changed(original: bytes, source: Path, specs: tuple["JobSpec", ...], now: datetime) -> list[str]:
    """The ids of the jobs the edit added or changed, then those it removed (`-id`): what
    `edited ...` names, rather than every job of the file."""
    from chronod.specfile import load_as_owned_by

    before = {s.id: s.spec_hash() for s in load_as_owned_by(original, str(source), 0, now=now).specs}
    after = {s.id: s.spec_hash() for s in specs}
    changed = sorted(i for i, h in after.items() if before.get(i) != h)
    return changed + [f"-{i}" for i in sorted(set(before) - set(after))] or ["no job definition (comments or layout)"]


def _keep(copy: Path, source: Path) -> Path:
    """A lasting copy of the edited file (mode 0600, in $TMPDIR) when it cannot be written."""
    fd, name = tempfile.mkstemp(prefix=f"{source.name}.", suffix=".edited")
    with os.fdopen(fd, "wb") as f:
        f.write(copy.read_bytes())
    return Path(name)


def _edit_until_valid(copy: Path, reg_dir: Path, source: Path, now: datetime) -> tuple["JobSpec", ...] | None:
    """Run the editor on `copy` until it is valid; its jobs, or None when nothing changed.
    Invalid and not at a terminal (or the answer is no): InvalidInput, the file untouched."""
    before = copy.read_bytes()
    while True:
        _run_editor(copy)
        if copy.read_bytes() == before:
            sys.stderr.write(f"chronoctl: no changes; {source} was left as it is\n")
            return None
        problems = _problems(copy, reg_dir, source, now)
        if not problems:
            from chronod.specfile import load_file

            return load_file(copy, now=now, secure=False).specs
        for line in problems:
            sys.stderr.write(line + "\n")
        if not (sys.stdin.isatty() and _ask("edit again? [Y/n] ")):
            raise InvalidInput(
                f"the edited file is not valid; {source} was left as it is",
                f"your version is in {_keep(copy, source)}: fix it, `chronoctl validate` it and copy it over {source}",
            )


def _problems(copy: Path, reg_dir: Path, source: Path, now: datetime) -> list[str]:
    """What is wrong with the edited copy, as lines naming the file (the registry's), line and job."""
    from chronoctl.render import escape_line
    from chronod.specfile import load_as_owned_by, load_file

    loaded = load_file(copy, now=now, secure=False)
    if loaded.ok:  # as the daemon will read it: from a file that keeps its owner
        loaded = load_as_owned_by(copy.read_bytes(), str(copy), os.stat(source).st_uid, now=now)
    out = []
    for p in loaded.problems:
        if p.severity != "error":
            continue
        where = f"{source}:{p.line}" if p.line else str(source)
        job = f" job {p.job_id}:" if p.job_id else ""
        out.append(escape_line(f"{where}:{job} {p.message}") + (f"\n  hint: {escape_line(p.hint)}" if p.hint else ""))
    if not loaded.specs and not out:
        out.append(f"{source}: defines no jobs (a job file has a top-level `jobs:` list)")
    others = common.load([reg_dir], now, secure=False).jobs if reg_dir.is_dir() else {}
    for s in loaded.specs:
        other = others.get(s.id)
        if other is not None and Path(other.source_file) != source:
            out.append(escape_line(f"{source}: job {s.id}: already defined in {other.source_file}"))
    return out


def _run_editor(path: Path) -> None:
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        code = subprocess.call([*shlex.split(editor), str(path)])
    except OSError as exc:
        raise CliError(
            f"cannot start the editor {editor!r}: {exc.strerror or exc}", "set VISUAL or EDITOR to an editor on PATH"
        ) from exc
    if code != 0:
        raise CliError(
            f"the editor {editor!r} exited with status {code}; nothing was written",
            "quit the editor normally to keep the change (in vi :wq; :cq is how vi says to throw it away)",
        )


def _ask(prompt: str) -> bool:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("", "y", "yes")
