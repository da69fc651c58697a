"""man/chronoctl.1 describes every command and option the typer app has, and renders cleanly."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import typer.main

from chronoctl.main import COMMAND_MODULES, app, build_app

MAN = Path(__file__).resolve().parents[2] / "man" / "chronoctl.1"


def _plain(roff: str) -> str:
    text = re.sub(r"\\f[BIRP]", "", roff)
    return text.replace("\\-", "-").replace("\\e", "\\").replace('"', "")


def _sections(items_only: bool = False) -> dict[str, str]:
    """`.SH`/`.SS` title -> its text, fonts and escapes removed; with `items_only`, only the
    tag lines of its `.TP` items (where an option is documented, not merely mentioned)."""
    out: dict[str, str] = {}
    title, after_tp = "", False
    for line in MAN.read_text().splitlines():
        if line.startswith((".SH ", ".SS ")):
            title = _plain(line[4:]).strip()
            out[title] = ""
        if not items_only or after_tp:
            out[title] = out.get(title, "") + _plain(line) + "\n"
        after_tp = line.strip() == ".TP"
    return out


def _commands(command, path=()):
    """(path, click command) for every command and subcommand below the root."""
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield (*path, name), sub
        yield from _commands(sub, (*path, name))


def _options(command) -> list[str]:
    return sorted(o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-"))


def _mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def _section_for(path: tuple[str, ...], sections: dict[str, str]) -> str | None:
    head = f"chronoctl {path[0]}"
    for title, body in sections.items():
        if title == head or title.startswith(head + " "):
            if len(path) == 1 or all(_mentions(title + body, word) for word in path[1:]):
                return title + "\n" + body
    return None


ROOT = typer.main.get_command(app)
COMMANDS = list(_commands(ROOT))


def test_the_app_has_the_commands_the_design_fixes():
    names = {p[0] for p, _ in COMMANDS}
    assert {"validate", "next", "explain", "schema", "forecast"} <= names


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_has_a_man_section_naming_each_of_its_options(path, command):
    title = _section_for(path, _sections())
    assert title is not None, f"man/chronoctl.1 has no .SS section for 'chronoctl {' '.join(path)}'"
    items = _sections(items_only=True)[title.splitlines()[0]]
    missing = [o for o in _options(command) if not _mentions(items, o)]
    assert missing == [], f"'chronoctl {' '.join(path)}' options without a .TP item in its man section: {missing}"


def test_every_command_is_in_the_table_that_lets_chronoctl_import_only_what_it_runs():
    top = sorted(ROOT.commands)
    assert sorted(COMMAND_MODULES) == top


@pytest.mark.parametrize("name", sorted(COMMAND_MODULES))
def test_the_app_built_for_one_command_has_that_command(name):
    assert name in typer.main.get_command(build_app(name)).commands


def test_every_global_option_is_in_the_man_page():
    text = _sections(items_only=True).get("GLOBAL OPTIONS", "")
    missing = [o for o in _options(ROOT) if not _mentions(text, o)]
    assert missing == []


def test_the_man_page_documents_every_exit_code_and_variable():
    text = _sections()
    exits = text.get("EXIT STATUS", "")
    for code in ("0", "1", "2", "3", "70"):
        assert re.search(rf"^\.B {code}$", exits, re.M), f"exit code {code} is not documented"
    env = text.get("ENVIRONMENT", "")
    for var in ("CHRONO_REGISTRY", "CHRONO_DB", "NO_COLOR", "CHRONO_TRACEBACK"):
        assert var in env


def test_the_man_page_renders_without_a_single_groff_warning():
    groff = shutil.which("groff")
    if groff is None:
        pytest.skip("GROFF IS NOT INSTALLED: man/chronoctl.1 was not checked for rendering warnings")
    proc = subprocess.run([groff, "-man", "-ww", "-z", str(MAN)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
