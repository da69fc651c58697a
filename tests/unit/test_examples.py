"""examples/jobs.yaml is a registry that validates and shows every kind of job off."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from chronod.specfile import load_registry

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs.yaml"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)


def load():
    result = load_registry([EXAMPLES], now=NOW, secure=False)
    assert result.ok, [p.format() for p in result.problems]
    return result.jobs


def test_the_examples_validate_without_errors():
    assert len(load()) >= 7


def test_the_examples_hold_every_kind_of_job_the_manual_talks_about():
    jobs = list(load().values())
    assert any(
        j.idempotency_class == "keyed" and j.schedule == "0 2 * * *" and j.timezone == "America/New_York" for j in jobs
    )
    assert any("compliance" in j.tags and j.max_silence_explicit and j.notify for j in jobs)
    assert any(j.idempotency_class == "idempotent" and j.schedule == "*/5 * * * *" for j in jobs)
    assert any(j.run_on.each for j in jobs)
    assert any(j.resource for j in jobs)
    assert any(j.tolerance_s == 0 and j.tolerance_reason for j in jobs)


def test_a_demo_job_fires_every_few_seconds_with_a_harmless_command():
    from chronod.core.schedule import compile_schedule

    demo = [j for j in load().values() if (compile_schedule(j.schedule, j.timezone).max_gap_s() or 10**9) <= 10]
    assert demo and all(str(j.command).startswith("echo") for j in demo)


def test_the_examples_need_no_other_user_and_write_nowhere_but_tmp():
    for job in load().values():
        assert job.user is None and job.group is None
        command = " ".join(job.command) if isinstance(job.command, tuple) else job.command
        assert ">" not in command.replace(">&2", "").replace("2>/dev/null", ""), command
