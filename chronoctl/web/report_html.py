"""`chronoctl report --format html`: the audit report as one self-contained, printable HTML
file (inline CSS, no script, no external asset): a header with the period, the database and
when it was made; per job its heat map, its totals and every occurrence that did not
succeed with its reason (chronod.core.report decides them all); a page break between jobs.

Print it to PDF with a browser, e.g. `chromium --headless --print-to-pdf=report.pdf report.html`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from chronoctl.web import heatmap

HERE = Path(__file__).parent


def render(reports: list[tuple[Any, str]], *, now: datetime, since: datetime, until: datetime, database: str) -> str:
    """The HTML of `reports` (each a JobReport and its schedule in words)."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    from chronod.core.escape import escape_control
    from chronod.core.history import NOT_DUE

    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape(default=True))
    env.filters["t"] = lambda v: "" if v is None else escape_control(v)
    env.filters["when"] = lambda at: at.strftime("%Y-%m-%d %H:%M UTC") if at else ""
    jobs = []
    for rep, words in reports:
        cells = heatmap.days(rep.lines, since, until)
        jobs.append(
            {
                "rep": rep,
                "spec": rep.spec,
                "words": words,
                "weeks": heatmap.weeks(cells),
                "totals": rep.totals,
                "expected": len([line for line in rep.lines if line.state != NOT_DUE]),
                "bad": [line for line in rep.lines if line.state not in ("succeeded", NOT_DUE)],
            }
        )
    css = (HERE / "static" / "report.css").read_text(encoding="utf-8")
    return env.get_template("report.html").render(
        jobs=jobs,
        now=now,
        since=since,
        until=until,
        database=database,
        css=css,
        levels=heatmap.LEVEL_WORDS,
    )
