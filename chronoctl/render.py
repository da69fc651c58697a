"""All chronoctl output goes through here: JSON, tables, times, bars, escaping.

Rules every command gets by using these functions:

- JSON is `json.dumps(..., indent=2)` with ASCII escapes, keys in a fixed order chosen by
  the command, and every datetime as ISO-8601 *with* its UTC offset.
- Text that came from a job, a job file or a database (commands, output tails, error
  texts, file names) goes through `escape_control` so no control character reaches a
  terminal: an ESC in a job's output is shown as `\\x1b`, never executed.
- Tables are drawn with rich only when stdout is a terminal (rich is imported then, and
  only then); piped output is plain aligned columns with no colour and no box drawing.
  Colour is off when the stream is not a terminal, `NO_COLOR` is set, or TERM is dumb.
- Times for humans are in the local zone (or a given one) with a relative age:
  `2026-12-02 11:30:00 EST (in 5m)`. The clock is never read here: `now` is an argument.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO

# C0 and C1 controls, DEL, bidi embeddings/overrides/isolates (they reorder what a
# terminal shows: "Trojan source"), line/paragraph separators, and lone surrogates
# (undecodable bytes smuggled through surrogateescape).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def escape_control(text: Any, keep: str = "\n\t") -> str:
    """`text` with every control character made visible (`\\x1b`, `\\u202e`), except those in `keep`.

    Backslashes are left alone, so a literal `\\x1b` typed in a command looks the same as an
    escaped ESC; what matters is that nothing reaches the terminal as a control sequence.
    """
    s = text if isinstance(text, str) else str(text)
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _visible(m.group()), s)


def escape_line(text: Any) -> str:
    """`escape_control` that also escapes newlines and tabs: for one table cell or one log line."""
    return escape_control(text, keep="")


_DSN_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)([^@\s]+)(@)")
_KW_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def redact_secrets(text: str) -> str:
    """`text` with passwords in URLs (`postgresql://u:SECRET@h`) and `password=...` replaced by `***`."""
    return _KW_PASSWORD.sub(r"\1***", _DSN_PASSWORD.sub(r"\1***\3", text))


# --- times ---------------------------------------------------------------------------


def _zone(tz: str | tzinfo | None) -> tzinfo | None:
    if tz is None or isinstance(tz, tzinfo):
        return tz
    from zoneinfo import ZoneInfo

    return ZoneInfo(tz)


def iso(at: datetime, tz: str | tzinfo | None = None) -> str:
    """ISO-8601 with the UTC offset, in zone `tz` (default: the datetime's own zone).

    Whole seconds are written without a fraction: `2026-11-01T02:30:00-05:00`.
    """
    if at.tzinfo is None:
        raise ValueError("refusing to render a naive datetime: its zone is unknown")
    zone = _zone(tz)
    local = at.astimezone(zone) if zone is not None else at
    return local.isoformat(timespec="seconds" if local.microsecond == 0 else "microseconds")


def age(seconds: float) -> str:
    """A compact, floored duration for humans: 45s, 5m, 3h, 3h12m, 2d, 2d4h."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h{m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d{h}h" if h else f"{d}d"


def relative(at: datetime, now: datetime) -> str:
    """`3h ago`, `in 5m`, or `now` (within a second) for `at` seen from `now`."""
    delta = (at - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"in {age(delta)}" if delta > 0 else f"{age(delta)} ago"


def human_time(at: datetime, now: datetime | None = None, tz: str | tzinfo | None = None) -> str:
    """`2026-12-02 11:30:00 EST (in 5m)`: local zone unless `tz`; the age only when `now` is given."""
    if at.tzinfo is None:
        raise ValueError("refusing to render a naive datetime: its zone is unknown")
    zone = _zone(tz)
    local = at.astimezone(zone) if zone is not None else at.astimezone()
    text = f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or local.strftime('%z')}"
    return f"{text} ({relative(at, now)})" if now is not None else text


# --- JSON ----------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot render {type(value).__name__} as JSON")


def to_json(data: Any) -> str:
    """Indented JSON with ASCII escapes (so control characters cannot reach a terminal);
    datetimes as ISO-8601 with offsets (convert them to the zone you want first)."""
    return json.dumps(data, indent=2, ensure_ascii=True, default=_json_default)


def print_json(data: Any, file: TextIO | None = None) -> None:
    """Write `to_json(data)` and a newline to stdout (or `file`)."""
    out = file or sys.stdout
    out.write(to_json(data) + "\n")


# --- terminals -----------------------------------------------------------------------


def is_terminal(stream: TextIO | None = None) -> bool:
    """True when `stream` (default stdout) is an interactive terminal."""
    stream = stream or sys.stdout
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def unicode_ok(stream: TextIO | None = None) -> bool:
    """Block characters only on a terminal that speaks UTF-8; pipes get plain ASCII."""
    stream = stream or sys.stdout
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    return is_terminal(stream) and encoding == "utf8"


def color_enabled(stream: TextIO | None = None) -> bool:
    """Colour only on a terminal, and never with NO_COLOR set (to anything) or TERM=dumb."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


def console(stream: TextIO | None = None):
    """A rich Console for `stream` (default stdout) with markup, emoji and highlighting off,
    so that data is printed as it is; rich is imported here, not before."""
    from rich.console import Console

    stream = stream or sys.stdout
    return Console(
        file=stream,
        no_color=not color_enabled(stream),
        color_system="auto" if color_enabled(stream) else None,
        markup=False,
        emoji=False,
        highlight=False,
    )


def echo(text: str = "", file: TextIO | None = None) -> None:
    """Print one line of our own text (callers escape anything that came from outside)."""
    (file or sys.stdout).write(text + "\n")


def warn(message: str) -> None:
    """`chronoctl: warning: message` on stderr."""
    sys.stderr.write(f"chronoctl: warning: {escape_line(message)}\n")


# --- tables --------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One table column: the row key, its header, alignment, and how to turn a value into text."""

    key: str
    header: str | None = None
    justify: str = "left"  # left | right
    format: Callable[[Any], str] | None = None

    def title(self) -> str:
        return self.header if self.header is not None else self.key.replace("_", " ").upper()

    def cell(self, row: Mapping[str, Any]) -> str:
        value = row.get(self.key)
        if value is None:
            return "-"
        text = self.format(value) if self.format else str(value)
        return escape_line(text)


ColumnSpec = Column | str | tuple


def _columns(columns: Iterable[ColumnSpec]) -> list[Column]:
    out = []
    for c in columns:
        if isinstance(c, Column):
            out.append(c)
        elif isinstance(c, str):
            out.append(Column(c))
        else:
            out.append(Column(*c))
    return out


def table_lines(rows: Sequence[Mapping[str, Any]], columns: Iterable[ColumnSpec]) -> list[str]:
    """Plain aligned columns (header first), two spaces apart: what pipes and greps get."""
    cols = _columns(columns)
    grid = [[c.title() for c in cols]] + [[c.cell(r) for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in grid) for i in range(len(cols))]
    lines = []
    for line in grid:
        cells = [
            text.rjust(w) if col.justify == "right" else text.ljust(w)
            for text, w, col in zip(line, widths, cols)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def print_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Iterable[ColumnSpec],
    *,
    title: str | None = None,
    file: TextIO | None = None,
    empty: str = "(none)",
) -> None:
    """Print `rows` (dicts) as a table of `columns`: a rich table on a terminal, plain
    columns otherwise. Every cell is escaped; `None` shows as `-`; no rows prints `empty`."""
    out = file or sys.stdout
    cols = _columns(columns)
    if not rows:
        if title:
            echo(escape_line(title), out)
        echo(empty, out)
        return
    if not is_terminal(out):
        if title:
            echo(escape_line(title), out)
        for line in table_lines(rows, cols):
            echo(line, out)
        return
    _rich_table(rows, cols, title, out)


def _rich_table(rows: Sequence[Mapping[str, Any]], cols: list[Column], title: str | None, out: TextIO) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=escape_line(title) if title else None, title_justify="left", show_edge=False, pad_edge=False)
    for c in cols:
        table.add_column(c.title(), justify=c.justify, overflow="fold")
    for r in rows:
        table.add_row(*(Text(c.cell(r)) for c in cols))
    console(out).print(table)


# --- bars ----------------------------------------------------------------------------

_EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(value: float, maximum: float, width: int, unicode: bool = True) -> str:
    """A horizontal bar of `value` out of `maximum` in `width` cells: unicode eighth-blocks,
    or `#` characters for plain output. A non-zero value always shows at least a sliver."""
    if maximum <= 0 or value <= 0 or width <= 0:
        return ""
    cells = value / maximum * width
    if not unicode:
        return "#" * max(1, round(cells))
    eighths = max(1, round(cells * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[part] if part else "")
