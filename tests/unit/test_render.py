"""chronoctl.render: escaping, times with offsets, relative ages, JSON, tables, bars."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from chronoctl import render

NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=timezone.utc)


# --- escape_control ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("plain text", "plain text"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("bell\x07", "bell\\x07"),
        ("nul\x00", "nul\\x00"),
        ("carriage\rreturn", "carriage\\x0dreturn"),
        ("del\x7f", "del\\x7f"),
        ("c1 csi\x9b2J", "c1 csi\\x9b2J"),
        ("rtl \u202eevil", "rtl \\u202eevil"),
        ("isolate \u2066x\u2069", "isolate \\u2066x\\u2069"),
        ("bad byte \udcff", "bad byte \\xff"),
        ("accents stay: café, 日本", "accents stay: café, 日本"),
    ],
)
def test_escape_control_makes_every_control_character_visible(raw, shown):
    assert render.escape_control(raw) == shown


# Unicode's Bidi_Control property (PropList.txt): every mark, embedding, override and
# isolate that reorders what a terminal shows ("Trojan source")
BIDI_CONTROL = (
    "\u061c\u200e\u200f" + "".join(map(chr, range(0x202A, 0x202F))) + "".join(map(chr, range(0x2066, 0x206A)))
)


@pytest.mark.parametrize("ch", list(BIDI_CONTROL), ids=lambda ch: f"U+{ord(ch):04X}")
def test_escape_control_makes_every_bidi_control_visible(ch):
    assert render.escape_control(f"a{ch}b") == f"a\\u{ord(ch):04x}b"


def test_escape_control_keeps_newlines_and_tabs():
    assert render.escape_control("a\tb\nc") == "a\tb\nc"


def test_escape_line_escapes_newlines_and_tabs_too():
    assert render.escape_line("a\tb\nc") == "a\\x09b\\x0ac"


def test_escape_control_output_never_contains_a_control_character():
    every = "".join(chr(i) for i in range(0x00, 0x200))
    out = render.escape_control(every, keep="")
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in out)


def test_escape_control_accepts_non_strings():
    assert render.escape_control(42) == "42"


# --- secrets -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("postgresql+psycopg://chrono:s3cret@db:5432/chrono", "postgresql+psycopg://chrono:***@db:5432/chrono"),
        (
            "could not connect to postgresql://u:p%40ss@h/db: refused",
            "could not connect to postgresql://u:***@h/db: refused",
        ),
        ("host=db password=hunter2 user=x", "host=db password=*** user=x"),
        ("sqlite:////var/lib/chrono/chrono.db", "sqlite:////var/lib/chrono/chrono.db"),
        ("postgresql://user@host/db", "postgresql://user@host/db"),
    ],
)
def test_redact_secrets_hides_passwords_in_database_urls(raw, shown):
    assert render.redact_secrets(raw) == shown


# --- times -------------------------------------------------------------------------------


def test_iso_keeps_the_offset_of_the_zone_asked_for():
    at = datetime(2026, 11, 1, 7, 30, tzinfo=timezone.utc)
    assert render.iso(at, "America/New_York") == "2026-11-01T02:30:00-05:00"
    assert render.iso(at) == "2026-11-01T07:30:00+00:00"


def test_iso_shows_the_summer_offset_in_summer():
    at = datetime(2027, 3, 14, 7, 0, tzinfo=timezone.utc)
    assert render.iso(at, ZoneInfo("America/New_York")) == "2027-03-14T03:00:00-04:00"


def test_iso_keeps_microseconds_only_when_there_are_some():
    at = datetime(2026, 1, 1, 0, 0, 0, 250000, tzinfo=timezone.utc)
    assert render.iso(at) == "2026-01-01T00:00:00.250000+00:00"


def test_iso_refuses_a_naive_datetime():
    with pytest.raises(ValueError):
        render.iso(datetime(2026, 1, 1))


@pytest.mark.parametrize(
    "delta_s, text",
    [
        (0, "now"),
        (0.4, "now"),
        (-45, "45s ago"),
        (300, "in 5m"),
        (-3 * 3600, "3h ago"),
        (-(3 * 3600 + 12 * 60 + 59), "3h12m ago"),
        (2 * 86400, "in 2d"),
        (-(2 * 86400 + 4 * 3600 + 30), "2d4h ago"),
        (59.9, "in 59s"),
    ],
)
def test_relative_ages_read_like_an_operator_would_say_them(delta_s, text):
    assert render.relative(NOW + timedelta(seconds=delta_s), NOW) == text


def test_human_time_is_in_the_given_zone_with_its_offset_and_age():
    at = NOW + timedelta(minutes=5)
    assert render.human_time(at, NOW, "America/New_York") == "2026-11-01 07:05:00 -05:00 (in 5m)"


def test_human_time_without_now_has_no_age():
    assert render.human_time(NOW, None, "UTC") == "2026-11-01 12:00:00 +00:00"


def test_human_time_follows_use_utc():
    render.use_utc(True)
    try:
        assert render.human_time(NOW) == "2026-11-01 12:00:00 +00:00"
        assert render.short_time(NOW + timedelta(hours=1), NOW) == "13:00:00"
        assert render.short_time(NOW + timedelta(days=1), NOW) == "11-02 12:00:00"
        assert render.zone_note(NOW) == "times in UTC, +00:00"
    finally:
        render.use_utc(False)


# --- JSON --------------------------------------------------------------------------------


def test_json_renders_datetimes_with_offsets_and_keeps_key_order():
    at = datetime(2026, 11, 1, 2, 30, tzinfo=ZoneInfo("America/New_York"))
    text = render.to_json({"z": 1, "at": at})
    assert json.loads(text) == {"z": 1, "at": "2026-11-01T02:30:00-05:00"}
    assert text.index('"z"') < text.index('"at"')
    assert text.startswith("{\n  ")


def test_json_escapes_control_characters_and_non_ascii():
    text = render.to_json({"out": "\x1b[2J\x9b café"})
    assert "\x1b" not in text and "\x9b" not in text
    assert json.loads(text) == {"out": "\x1b[2J\x9b café"}


def test_json_refuses_what_it_cannot_render_faithfully():
    with pytest.raises(TypeError):
        render.to_json({"x": object()})


# --- tables and bars ---------------------------------------------------------------------


def test_plain_table_aligns_columns_and_escapes_cells():
    rows = [{"id": "a", "n": 5, "out": "x\x1b[2Jy"}, {"id": "long-name", "n": 12, "out": None}]
    cols = [render.Column("id", "JOB"), render.Column("n", "N", justify="right"), "out"]
    assert render.table_lines(rows, cols) == [
        "JOB         N  OUT",
        "a           5  x\\x1b[2Jy",
        "long-name  12  -",
    ]


def test_print_table_to_a_pipe_is_plain_text():
    out = io.StringIO()
    render.print_table([{"a": 1}], ["a"], file=out, title="t")
    assert out.getvalue() == "t\nA\n1\n"


def test_fit_columns_drops_the_least_useful_first_and_never_a_kept_column():
    rows = [{"a": "x" * 30, "b": "y" * 30, "c": "z" * 30, "d": "w" * 30}]
    cols = [render.Column("a"), render.Column("b", drop=1), render.Column("c", drop=2), render.Column("d")]
    assert [c.key for c in render.fit_columns(rows, cols, 96)] == ["a", "b", "d"]
    assert [c.key for c in render.fit_columns(rows, cols, 80)] == ["a", "d"]
    assert [c.key for c in render.fit_columns(rows, cols, 200)] == ["a", "b", "c", "d"]


def test_a_wrap_column_needs_only_its_longest_word():
    rows = [{"a": "x" * 30, "why": "one two three four five six seven eight nine ten eleven"}]
    cols = [render.Column("a"), render.Column("why", wrap=True), render.Column("z", drop=1)]
    assert [c.key for c in render.fit_columns(rows, cols, 46)] == ["a", "why"]


def test_print_table_on_a_terminal_fits_its_width_without_breaking_cells(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("NO_COLOR", "1")
    out = Tty()
    rows = [{"id": "0123456789abcdef", "when": "12-02 11:30:05", "why": "a long reason that has to wrap somewhere"}]
    render.print_table(rows, [render.Column("id"), render.Column("when"), render.Column("why", wrap=True)], file=out)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 40 for line in lines), lines
    assert "0123456789abcdef" in lines[1] and "12-02 11:30:05" in lines[1]


def test_print_table_with_no_rows_says_so():
    out = io.StringIO()
    render.print_table([], ["a"], file=out, empty="no runs")
    assert out.getvalue() == "no runs\n"


def test_color_is_off_with_no_color_set(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert render.color_enabled(Tty())
    monkeypatch.setenv("NO_COLOR", "")
    assert not render.color_enabled(Tty())
    assert not render.color_enabled(io.StringIO())


@pytest.mark.parametrize(
    "value, maximum, width, unicode, shown",
    [
        (10, 10, 4, True, "████"),
        (5, 10, 4, True, "██"),
        (1, 10, 4, True, "▍"),
        (1, 1000, 4, True, "▏"),
        (0, 10, 4, True, ""),
        (5, 10, 4, False, "##"),
        (1, 1000, 4, False, "#"),
    ],
)
def test_bars_scale_to_the_maximum_and_never_hide_a_non_zero_value(value, maximum, width, unicode, shown):
    assert render.bar(value, maximum, width, unicode) == shown


def test_json_is_indented_for_a_terminal_and_one_line_for_a_pipe():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    piped, tty = io.StringIO(), Tty()
    render.print_json({"a": [1, 2]}, file=piped)
    render.print_json({"a": [1, 2]}, file=tty)
    assert piped.getvalue() == '{"a": [1, 2]}\n'
    assert tty.getvalue().startswith('{\n  "a"') and json.loads(tty.getvalue()) == {"a": [1, 2]}
