"""The smaller cases of careless input: every refusal of a file says on which line, and
every hint suggests something that is accepted."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from chronod.core.schedule import ScheduleError, compile_schedule
from chronod.specfile import load_file, parse_text


@pytest.mark.parametrize(
    "text, line",
    [
        (b"jobs:\n  - id: x\n    owner: a\x1bb\n", 3),
        (b"jobs:\n  - id: x\x00\n", 2),
        (b"jobs:\n\n\n  - id: \xff\n", 4),
        (b"jobs:\n  - id: x\n    owner: \x07\n", 3),
    ],
)
def test_non_utf8_nul_and_raw_control_characters_are_refused_with_their_line(text, line):
    (problem,) = parse_text(text, "f.yaml").problems
    assert problem.line == line, problem.format()
    assert f"f.yaml:{line}:" in problem.format()


def test_the_hint_for_every_0s_suggests_an_interval_that_is_accepted():
    with pytest.raises(ScheduleError) as err:
        compile_schedule("@every 0s")
    suggested = err.value.hint.split("write ", 1)[1].split(" or")[0]
    assert compile_schedule(suggested).every_s == 1
    assert compile_schedule(suggested).next_after(datetime(2026, 1, 1, tzinfo=timezone.utc))


def test_a_number_yaml_reads_as_text_is_named_as_such(tmp_path):
    """YAML 1.1 reads `1e308` (no dot) as text: the error said "not a string" of what the
    author wrote as a number."""
    text = (
        'jobs:\n  - id: a\n    owner: o\n    schedule: "@daily"\n    command: "true"\n'
        "    idempotency_class: idempotent\n    retry:\n      attempts: 3\n      backoff_s: 1e308\n"
    )
    path = tmp_path / "e.yaml"
    path.write_text(text)
    result = load_file(path, now=datetime(2026, 12, 1, tzinfo=timezone.utc), secure=False)
    (problem,) = [p for p in result.problems if p.severity == "error"]
    assert problem.line == 9 and "must be a whole number written in digits, not '1e308'" in problem.message
    assert problem.hint.startswith("write it in digits, at most ")
