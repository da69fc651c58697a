"""`chronoctl validate` and `chronoctl schema`: job files checked the way the daemon reads them."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, Iterable

import typer

from chronoctl import common
from chronoctl.errors import EXIT_NO, UsageError


class Format(str, Enum):
    text = "text"
    json = "json"
    github = "github"


def register(app: typer.Typer) -> None:
    """Add `validate` and `schema` to `app`."""
    app.command("validate")(validate)
    app.command("schema")(schema)


def validate(
    paths: list[Path] = typer.Argument(..., metavar="PATH...", help="Job files or registry directories."),
    strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors."),
    fmt: Format = typer.Option(Format.text, "--format", help="text, json, or github (workflow annotations)."),
    secure: bool = typer.Option(
        False,
        "--secure",
        help="Apply the root daemon's file checks (owner, mode, links, names) even when "
        "not root; as root they always apply.",
    ),
    no_file_checks: bool = typer.Option(
        False, "--no-file-checks", help="Skip the root daemon's file checks (for CI on a checkout, run as root)."
    ),
) -> None:
    """Check job files: every problem with file, line, job, field and a hint. Exit 1 on errors.
    Run as root, the daemon's file checks apply too, so what it calls valid a root daemon loads."""
    if secure and no_file_checks:
        raise UsageError("give --secure or --no-file-checks, not both")
    common.check_paths_exist(paths)
    checks = True if secure else False if no_file_checks else None  # None: as the daemon, when root
    result = common.load(list(paths), common.now_utc(), secure=checks)
    problems = [_problem_dict(p, strict) for p in result.problems]
    if not result.jobs and not problems:
        problems.append(_no_jobs_problem(paths, strict))
    errors = sum(p["severity"] == "error" for p in problems)
    {Format.text: _print_text, Format.json: _print_json, Format.github: _print_github}[fmt](
        problems, len(result.jobs), strict
    )
    if errors:
        raise typer.Exit(EXIT_NO)


def _problem_dict(p: Any, strict: bool) -> dict[str, Any]:
    severity = "error" if strict else p.severity
    return {
        "severity": severity,
        "file": str(p.file) if p.file else None,
        "line": p.line or None,
        "job_id": p.job_id or None,
        "path": p.path or None,
        "message": p.message,
        "hint": p.hint or None,
    }


def _no_jobs_problem(paths: Iterable[Path], strict: bool) -> dict[str, Any]:
    names = ", ".join(str(p) for p in paths)
    return {
        "severity": "error" if strict else "warning",
        "file": None,
        "line": None,
        "job_id": None,
        "path": None,
        "message": f"no jobs found in {names}",
        "hint": "a registry is a directory of *.yaml or *.yml files, each with a top-level `jobs:` list",
    }


def _message(p: dict[str, Any]) -> str:
    """`job 'x': field.path: message (hint: ...)` with the parts that are known."""
    parts = []
    if p["job_id"]:
        parts.append(f"job {p['job_id']!r}")
    if p["path"]:
        parts.append(str(p["path"]))
    parts.append(p["message"])
    text = ": ".join(parts)
    return f"{text} (hint: {p['hint']})" if p["hint"] else text


def _location(p: dict[str, Any]) -> str:
    if not p["file"]:
        return "chronoctl"
    return f"{p['file']}:{p['line']}" if p["line"] else p["file"]


def _summary(jobs: int, problems: list[dict[str, Any]], strict: bool) -> str:
    errors = sum(p["severity"] == "error" for p in problems)
    warnings = len(problems) - errors
    verdict = "invalid" if errors else "valid"
    tail = " (--strict: warnings count as errors)" if strict and errors else ""
    return f"{verdict}: {jobs} job{'s' * (jobs != 1)}, {errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}{tail}"


def _print_text(problems: list[dict[str, Any]], jobs: int, strict: bool) -> None:
    from chronoctl.render import echo, escape_control

    for p in problems:
        echo(escape_control(f"{_location(p)}: {p['severity']}: {_message(p)}", keep=""))
    echo(_summary(jobs, problems, strict))


def _print_json(problems: list[dict[str, Any]], jobs: int, strict: bool) -> None:
    from chronoctl.render import print_json

    errors = sum(p["severity"] == "error" for p in problems)
    print_json(
        {
            "ok": errors == 0,
            "strict": strict,
            "jobs": jobs,
            "errors": errors,
            "warnings": len(problems) - errors,
            "problems": problems,
        }
    )


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotation(p: dict[str, Any]) -> str:
    """One GitHub Actions workflow command: `::error file=F,line=L,title=chrono::message`."""
    from chronoctl.render import escape_control

    props = []
    if p["file"]:
        props.append(f"file={_gh_property(escape_control(p['file'], keep=''))}")
        if p["line"]:
            props.append(f"line={int(p['line'])}")
    props.append("title=chrono")
    return f"::{p['severity']} {','.join(props)}::{_gh_data(escape_control(_message(p), keep=chr(10)))}"


def _print_github(problems: list[dict[str, Any]], jobs: int, strict: bool) -> None:
    from chronoctl.render import echo

    for p in problems:
        echo(github_annotation(p))
    echo(_summary(jobs, problems, strict))


def schema() -> None:
    """Print the JSON Schema of a job file (for editors and CI linters)."""
    from chronoctl.render import print_json
    from chronod.core.jsonschema import spec_json_schema

    print_json(spec_json_schema())
