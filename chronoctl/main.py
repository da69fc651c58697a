"""chronoctl, the command line of chrono.

`build_app()` makes the typer application; each command module adds its commands with
`register(app)`, and `COMMAND_MODULES` says which module adds which command. `main()` is the error
boundary and the console-script entry point: it runs the program and turns every way it
can end into one line on stderr and an exit code (see `chronoctl.errors`):

    0   success, or "yes"
    1   a "no" answer, or invalid input (validation failed, did not run)
    2   a usage error (bad flags, missing path) or an unknown job
    3   the database or the daemon could not be reached
    70  a bug in chronoctl: one line, and "re-run with --traceback"
    130 interrupted (Ctrl-C); a closed stdout (`| head`) ends quietly with 1

Errors read `chronoctl: error: <message>` then `hint: <what to do>`. A Python traceback
is printed only with `chronoctl --traceback ...` or `CHRONO_TRACEBACK=1`, and even then
passwords in database URLs are masked.

Only typer and our own small modules are imported at start; rich, yaml, SQLAlchemy and
the schedule engine are imported by the commands that need them, so that `--help` and
the commands that need no database start in well under 300 ms.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer

from chronoctl import errors

_TRUE = ("1", "true", "yes", "on")

# Which module adds each command (with `register(app)`). `main` imports only the module of
# the command it runs, so `chronoctl next` never pays for the importer or the store; help,
# completion and a command missing from this table load them all. A new command module:
# one line per command here (tests/unit/test_man_chronoctl_drift.py checks the table).
COMMAND_MODULES = {
    "validate": "chronoctl.cmd_spec",
    "schema": "chronoctl.cmd_spec",
    "next": "chronoctl.cmd_schedule",
    "explain": "chronoctl.cmd_schedule",
    "forecast": "chronoctl.cmd_schedule",
    "import": "chronoctl.cmd_import",
    "register": "chronoctl.cmd_registry",
    "unregister": "chronoctl.cmd_registry",
    "list": "chronoctl.cmd_registry",
    "status": "chronoctl.cmd_history",
    "runs": "chronoctl.cmd_history",
    "logs": "chronoctl.cmd_history",
    "did-it-run": "chronoctl.cmd_history",
    "missed": "chronoctl.cmd_history",
    "trigger": "chronoctl.cmd_control",
    "pause": "chronoctl.cmd_control",
    "resume": "chronoctl.cmd_control",
    "backfill": "chronoctl.cmd_backfill",
    "db": "chronoctl.cmd_db",
    "report": "chronoctl.cmd_report",
    "show": "chronoctl.cmd_edit",
    "edit": "chronoctl.cmd_edit",
    "web": "chronoctl.cmd_web",
}


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"chronoctl {version('chrono')}")
        except PackageNotFoundError:
            typer.echo("chronoctl (not installed)")
        raise typer.Exit()


def _root(
    traceback: bool = typer.Option(
        False, "--traceback", help="Show the Python traceback of an unexpected error (also CHRONO_TRACEBACK=1)."
    ),
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_show_version, is_eager=True
    ),
) -> None:
    """Validate, explain and operate chrono jobs: the command line of the chrono scheduler."""


def _register_module(target: typer.Typer, name: str) -> None:
    import importlib

    module = importlib.import_module(name)
    if name == "chronoctl.cmd_import":
        target.command("import")(module.import_cmd)
    else:
        module.register(target)


def build_app(command: str | None = None) -> typer.Typer:
    """The typer app with every command, or only with the module that adds `command`."""
    target = typer.Typer(
        name="chronoctl",
        help="Validate, explain and operate chrono jobs: the command line of the chrono scheduler.",
        epilog="Exit status: 0 ok/yes, 1 no/invalid, 2 usage or unknown job, 3 database/daemon unreachable. See chronoctl(1).",
        no_args_is_help=True,
        add_completion=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        pretty_exceptions_show_locals=False,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    )
    target.callback()(_root)
    modules = [COMMAND_MODULES[command]] if command in COMMAND_MODULES else COMMAND_MODULES.values()
    for name in dict.fromkeys(modules):
        _register_module(target, name)
    return target


def __getattr__(name: str) -> Any:
    # `from chronoctl.main import app`: the full app, built on first use.
    if name == "app":
        globals()["app"] = full = build_app()
        return full
    raise AttributeError(name)


def _command_name(args: list[str]) -> str | None:
    """The command `args` run (global options are flags, so it is the first non-option)."""
    if os.environ.get("_CHRONOCTL_COMPLETE"):
        return None
    return next((a for a in args if not a.startswith("-")), None)


# --- the error boundary --------------------------------------------------------------


def _traceback_wanted(args: list[str]) -> bool:
    if os.environ.get("CHRONO_TRACEBACK", "").strip().lower() in _TRUE:
        return True
    head = args[: next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))]
    return "--traceback" in head


def _say(prefix: str, message: str) -> None:
    from chronoctl.render import escape_control, redact_secrets

    sys.stderr.write(f"{prefix}{escape_control(redact_secrets(str(message)), keep='')}\n")


def _error(message: str, hint: str | None = None) -> None:
    _say("chronoctl: error: ", message)
    if hint:
        _say("hint: ", hint)


def program(args: list[str]) -> int:
    """Parse `args` and run the command; return its exit code. Errors propagate to `main`."""
    from chronoctl import _params

    _params.install()
    command = typer.main.get_command(build_app(_command_name(args)))
    rv = command.main(args=args, prog_name="chronoctl", standalone_mode=False)
    return rv if isinstance(rv, int) else errors.EXIT_OK


def _click_error(exc: Exception) -> int:
    from typer._click import exceptions as click_exc

    if isinstance(exc, click_exc.NoArgsIsHelpError):
        sys.stderr.write(exc.format_message() + "\n")
        return errors.EXIT_USAGE
    if isinstance(exc, click_exc.UsageError):
        ctx = exc.ctx
        path = ctx.command_path if ctx is not None else "chronoctl"
        _error(exc.format_message(), f"run '{path} --help' for usage")
        return errors.EXIT_USAGE
    if isinstance(exc, click_exc.ClickException):
        _error(exc.format_message())
        return exc.exit_code
    _say("chronoctl: ", "interrupted")
    return errors.EXIT_INTERRUPTED


def _unexpected(exc: BaseException, args: list[str]) -> int:
    if _traceback_wanted(args):
        import traceback

        from chronoctl.render import redact_secrets

        sys.stderr.write(redact_secrets("".join(traceback.format_exception(exc))))
    summary = str(exc).strip().splitlines()
    detail = f": {summary[0]}" if summary else ""
    _error(
        f"unexpected {type(exc).__name__}{detail}",
        "this is a bug in chronoctl; re-run with --traceback (or CHRONO_TRACEBACK=1) and report what it prints",
    )
    return errors.EXIT_INTERNAL


def _closed_stdout() -> int:
    # Whoever read our output has gone (`chronoctl runs x | head`): say nothing more, and
    # keep the interpreter from complaining while it flushes at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return errors.EXIT_NO


def main(argv: list[str] | None = None) -> int:
    """The console script: run `program`, map every outcome to an exit code and one
    `chronoctl: error:` line. Never shows a raw traceback unless asked to."""
    from typer._click import exceptions as click_exc

    args = sys.argv[1:] if argv is None else list(argv)
    try:
        return program(args)
    except errors.CliError as exc:
        _error(exc.message, exc.hint)
        return exc.code
    except (click_exc.ClickException, typer.Abort) as exc:
        return _click_error(exc)
    except KeyboardInterrupt:
        _say("chronoctl: ", "interrupted")
        return errors.EXIT_INTERRUPTED
    except BrokenPipeError:
        return _closed_stdout()
    except Exception as exc:  # the boundary: anything else is a bug, reported in one line
        return _unexpected(exc, args)


if __name__ == "__main__":
    sys.exit(main())
