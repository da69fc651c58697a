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
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, TextIO

from chronod.core.escape import escape_control as escape_control  # re-exported for the commands

if TYPE_CHECKING:
    from rich.console import Console


def escape_line(text: Any) -> str:
    """`escape_control` that also escapes newlines and tabs: for one table cell or one log line."""
    return escape_control(text, keep="")


# the user information runs to the last '@' of the word: no part of a password with an '@' shows
_DSN_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(\S+)(@)")
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
    local = _local(at, tz)
    text = f"{local:%Y-%m-%d %H:%M:%S} {offset_text(at, tz)}"
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


def to_json(data: Any, indent: int | None = 2) -> str:
    """JSON with ASCII escapes (so control characters cannot reach a terminal), indented
    unless `indent` is None; datetimes as ISO-8601 with offsets (convert them to the zone
    you want first)."""
    return json.dumps(data, indent=indent, ensure_ascii=True, default=_json_default)


def print_json(data: Any, file: TextIO | None = None) -> None:
    """Write the document and a newline to stdout (or `file`): indented for a person at a
    terminal, one line for a program (Python's encoder is several times faster without
    indentation, which matters for `missed` over a large fleet)."""
    out = file or sys.stdout
    out.write(to_json(data, indent=2 if _isatty(out) else None) + "\n")


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


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


def console(stream: TextIO | None = None) -> "Console":
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


def echo_wrapped(text: str, indent: str = "", file: TextIO | None = None, hang: str | None = None) -> None:
    """One line of our own text (escaped by the caller) starting with `indent`; on a
    terminal wrapped between words at its width, the rest of it under the first word's
    column plus two (or `hang`), so no word is cut at the terminal's edge."""
    out = file or sys.stdout
    if not is_terminal(out):
        echo(indent + text, out)
        return
    import textwrap

    width = max(terminal_width(out), len(indent) + 20)
    rest = indent + "  " if hang is None else hang
    for line in textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]:
        echo(line, out)


_LABEL = re.compile(r"^(\s*[A-Za-z][A-Za-z -]{0,20}:\s+)(?=\S)")


def echo_line(text: str, file: TextIO | None = None) -> None:
    """One line of our own text (escaped by the caller), wrapped on a terminal so that it
    fits: a `label:   value` line under its value's column, another under its own
    indentation plus two."""
    m = _LABEL.match(text)
    lead = len(text) - len(text.lstrip(" "))
    hang = " " * (len(m.group(1)) if m and len(m.group(1)) <= 24 else lead + 2)
    echo_wrapped(text, "", file, hang=hang)


LABEL_WIDTH = 10


def echo_field(label: str, value: Any, file: TextIO | None = None) -> None:
    """`label     value` (the value escaped); on a terminal a long value wraps between
    words under itself, so no word is cut at the terminal's edge."""
    out = file or sys.stdout
    text = escape_line(value)
    pad = " " * LABEL_WIDTH
    if not is_terminal(out):
        echo(f"{label:<{LABEL_WIDTH}}{text}".rstrip(), out)
        return
    import textwrap

    width = max(terminal_width(out), LABEL_WIDTH + 20)
    lines = textwrap.wrap(text, width - LABEL_WIDTH, break_long_words=False, break_on_hyphens=False) or [""]
    echo(f"{label:<{LABEL_WIDTH}}{lines[0]}".rstrip(), out)
    for line in lines[1:]:
        echo(pad + line, out)


def warn(message: str) -> None:
    """`chronoctl: warning: message` on stderr; on a terminal wrapped between words."""
    text = f"chronoctl: warning: {escape_line(message)}"
    if is_terminal(sys.stderr):
        import textwrap

        text = "\n".join(
            textwrap.wrap(
                text, terminal_width(sys.stderr), break_long_words=False, break_on_hyphens=False, subsequent_indent="  "
            )
        )
    sys.stderr.write(text + "\n")


# --- tables --------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One table column: the row key, its header, alignment, and how to turn a value into text.

    On a terminal a table is fitted to its width: no cell is ever broken inside a word,
    a time or an id. Columns with `drop` > 0 are left out, highest `drop` first, until the
    rest fit; only a `wrap` column (free text: a reason, a message) may then wrap, and
    only between words.
    """

    key: str
    header: str | None = None
    justify: str = "left"  # left | right
    format: Callable[[Any], str] | None = None
    drop: int = 0  # 0: always shown; otherwise the higher, the sooner it goes when space runs out
    wrap: bool = False  # free text that may wrap between words

    def title(self) -> str:
        return self.header if self.header is not None else self.key.replace("_", " ").upper()

    def cell(self, row: Mapping[str, Any]) -> str:
        value = row.get(self.key)
        if value is None:
            return "-"
        text = self.format(value) if self.format else str(value)
        return escape_line(text)


ColumnSpec = Column | str | tuple[Any, ...]


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
        cells = [text.rjust(w) if col.justify == "right" else text.ljust(w) for text, w, col in zip(line, widths, cols)]
        lines.append("  ".join(cells).rstrip())
    return lines


def print_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Iterable[ColumnSpec],
    *,
    title: str | None = None,
    file: TextIO | None = None,
    empty: str = "(none)",
    wide: bool = False,
) -> None:
    """Print `rows` (dicts) as a table of `columns`: a rich table fitted to the width on a
    terminal, plain columns otherwise (and with `wide`: every column, however wide).
    Every cell is escaped; `None` shows as `-`; no rows prints `empty`."""
    out = file or sys.stdout
    cols = _columns(columns)
    if not rows:
        if title:
            echo(escape_line(title), out)
        echo(empty, out)
        return
    if wide or not is_terminal(out):
        if title:
            echo(escape_line(title), out)
        for line in table_lines(rows, cols):
            echo(line, out)
        return
    _rich_table(rows, cols, title, out)


def terminal_width(out: TextIO | None = None) -> int:
    """The width of the terminal behind `out` (COLUMNS when set, else 80 when unknown)."""
    return console(out).width


WRAP_MIN = 12  # the narrowest a free-text column is squeezed to before columns are dropped


def fit_columns(rows: Sequence[Mapping[str, Any]], cols: list[Column], width: int) -> list[Column]:
    """The columns of `cols` that fit in `width` cells, two spaces apart, dropping the
    highest `drop` first. A `wrap` column counts as its longest word (at least WRAP_MIN
    cells when its text is longer), since it may wrap between words."""

    def need(c: Column) -> int:
        cells = [c.title()] + [c.cell(r) for r in rows]
        if not c.wrap:
            return max(len(t) for t in cells)
        longest_word = max((len(w) for t in cells for w in t.split()), default=1)
        return min(max(len(t) for t in cells), max(longest_word, WRAP_MIN))

    kept = list(cols)
    while len(kept) > 1 and sum(need(c) for c in kept) + 2 * len(kept) > width:  # (rich pads the last one too)
        droppable = [c for c in kept if c.drop > 0]
        if not droppable:
            break
        kept.remove(max(droppable, key=lambda c: (c.drop, kept.index(c))))
    return kept


def _rich_table(rows: Sequence[Mapping[str, Any]], cols: list[Column], title: str | None, out: TextIO) -> None:
    from rich.table import Table
    from rich.text import Text

    con = console(out)
    cols = fit_columns(rows, cols, con.width)
    if title:  # above the table, wrapped at the terminal's width (a table's title wraps at the table's)
        con.print(Text(escape_line(title), style="italic"), soft_wrap=False)
    table = Table(
        show_edge=False,
        pad_edge=False,
        box=None,
        padding=(0, 2, 0, 0),
        collapse_padding=True,
    )
    for c in cols:
        texts = [c.title()] + [c.cell(r) for r in rows]
        widest = max(len(t) for t in texts)
        # a free-text column wraps between words, never inside one (a header such as
        # ENV/STDIN/COMMAND too), as far as the width allows
        word = min(max((len(w) for t in texts for w in t.split()), default=1), WRAP_MIN + 8)
        table.add_column(
            c.title(),
            justify="right" if c.justify == "right" else "left",
            no_wrap=not c.wrap,
            overflow="fold" if c.wrap else "ellipsis",
            min_width=word if c.wrap else widest,
            style=None,
            header_style="bold",
        )
    for r in rows:
        table.add_row(*(Text(c.cell(r), style=_cell_style(c, r) or "") for c in cols))
    con.print(table)


# --- state words ----------------------------------------------------------------------

STATE_STYLES = {
    "succeeded": "green",
    "running": "cyan",
    "failed": "red",
    "timed_out": "red",
    "lost": "red",
    "pending": "dim",
    "retry_wait": "yellow",
    "cancelled": "dim",
    "missing": "red",
}


def state_style(state: str) -> str | None:
    """The colour of a run state word on a terminal: green for success, red for failure,
    yellow for waiting and skipped, dim for what has not happened."""
    if state.startswith("skipped"):
        return "yellow"
    return STATE_STYLES.get(state)


def _cell_style(c: Column, row: Mapping[str, Any]) -> str | None:
    if c.key not in ("state", "last_state", "last"):
        return None
    value = row.get(c.key)
    return state_style(str(value).split()[0]) if value else None


def styled(text: str, style: str | None, out: TextIO | None = None) -> str:
    """`text` wrapped in the ANSI colour `style` when `out` (stdout) takes colour; else as it is."""
    codes = {"green": "32", "red": "31", "yellow": "33", "cyan": "36", "dim": "2", "bold": "1"}
    if not style or style not in codes or not color_enabled(out):
        return text
    return f"\x1b[{codes[style]}m{text}\x1b[0m"


# --- run ids and compact times ----------------------------------------------------------

SHORT_ID = 8


def short_id(run_id: str | None, wide: bool = False) -> str | None:
    """A run id as tables show it: its first 8 characters (every command takes a unique
    prefix), or whole with `wide`."""
    if run_id is None:
        return None
    return run_id if wide else run_id[:SHORT_ID]


_DISPLAY_UTC = False


def use_utc(flag: bool) -> None:
    """Show times in UTC instead of the local zone, for the rest of this command."""
    global _DISPLAY_UTC
    _DISPLAY_UTC = flag


def display_zone() -> tzinfo | None:
    """The zone times are shown in: UTC with --utc, else None (the local zone)."""
    from datetime import timezone as _tz

    return _tz.utc if _DISPLAY_UTC else None


def _local(at: datetime, tz: str | tzinfo | None = None) -> datetime:
    if at.tzinfo is None:
        raise ValueError("refusing to render a naive datetime: its zone is unknown")
    zone = _zone(tz) or display_zone()
    return at.astimezone(zone) if zone is not None else at.astimezone()


def offset_text(at: datetime, tz: str | tzinfo | None = None) -> str:
    """`+01:00`: the UTC offset of the display zone at `at`."""
    text = _local(at, tz).strftime("%z")
    return f"{text[:3]}:{text[3:]}" if len(text) == 5 else text


def short_time(at: datetime | None, now: datetime | None = None, tz: str | tzinfo | None = None) -> str | None:
    """A time for a table cell, in the display zone: `12-02 11:30:05`, or `11:30:05`
    on the day of `now`; the zone and offset are said once, by `zone_note`."""
    if at is None:
        return None
    local = _local(at, tz)
    if now is not None and _local(now, tz).date() == local.date():
        return f"{local:%H:%M:%S}"
    return f"{local:%m-%d %H:%M:%S}"


def zone_note(now: datetime, tz: str | tzinfo | None = None) -> str:
    """`times in CET, +01:00`: what the short times of a table are in."""
    local = _local(now, tz)
    return f"times in {local.tzname() or 'local time'}, {offset_text(now, tz)}"


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
