"""Retention, pure: grouping jobs by history_days, the words, and what the history and the
audit report say about an occurrence at or before a job's pruning watermark."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from chronod.core import history, report, retention
from chronod.core.identity import run_id
from chronod.core.model import JobSpec
from chronod.store.api import Pruned, Run

UTC = timezone.utc
NOW = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)
DAILY = JobSpec(
    id="ledger", owner="finance", schedule="0 3 * * *", command="true", idempotency_class="idempotent", history_days=30
)


def day(back: int) -> datetime:
    return datetime(2026, 3, 10, 3, 0, tzinfo=UTC) - timedelta(days=back)


def ok(back: int, state: str = "succeeded") -> Run:
    at = day(back)
    return Run(
        run_id=run_id("ledger", at),
        job_id="ledger",
        job_key="ledger",
        scheduled_at=at,
        fire_at=at,
        state=state,
        attempts=1,
        started_at=at,
        finished_at=at + timedelta(seconds=5),
    )


MARK = Pruned("ledger", day(31), 30 * 86400, NOW)


def test_jobs_are_grouped_by_their_retention_and_unknown_jobs_named():
    assert retention.by_retention({"a": 30, "b": 400, "c": 30}) == {30 * 86400: ["a", "c"], 400 * 86400: ["b"]}
    assert retention.unknown_jobs(["a", "gone", "x"], {"a": 30}) == ["gone", "x"]
    assert retention.cutoff(NOW, 86400) == NOW - timedelta(days=1)


def test_a_retention_in_words():
    assert retention.kept_text(86400) == "1 day"
    assert retention.kept_text(400 * 86400) == "400 days"
    assert retention.kept_text(36 * 3600) == "1d12h"
    assert retention.pruned_reason(30 * 86400) == "pruned (history kept 30 days)"


def test_was_pruned_includes_the_watermark_itself():
    assert retention.was_pruned(day(31), MARK) and retention.was_pruned(day(40), MARK)
    assert not retention.was_pruned(day(30), MARK)
    assert not retention.was_pruned(day(40), None)


def test_did_it_run_says_pruned_at_or_before_the_watermark_and_no_record_after_it():
    runs = [ok(b) for b in range(31) if b != 5]
    old = history.did_it_run(DAILY, runs, now=NOW, at=day(40), pruned=MARK)
    assert (old.yes, old.state) == (False, "pruned") and "pruned (history kept 30 days)" in old.reason
    gap = history.did_it_run(DAILY, runs, now=NOW, at=day(5), pruned=MARK)
    assert gap.state == history.NO_RECORD
    assert history.did_it_run(DAILY, runs, now=NOW, at=day(6), pruned=MARK).yes


def test_a_row_that_survived_pruning_is_reported_as_it_is():
    kept = ok(40)  # the job's latest success, kept by the pruner
    assert history.did_it_run(DAILY, [kept], now=NOW, at=day(40), pruned=MARK).yes


def test_missed_does_not_count_pruned_occurrences_and_names_the_watermarks_in_the_window():
    runs = [ok(b) for b in range(31) if b != 5]
    misses = history.missed([DAILY], runs, since=NOW - timedelta(days=60), now=NOW, pruned={"ledger": MARK})
    assert [m.scheduled_at for m in misses] == [day(5)]
    without = history.missed([DAILY], runs, since=NOW - timedelta(days=60), now=NOW)
    assert len(without) == 1 + 29  # before retention knew, the same history looked like 29 more misses
    assert history.pruned_in({"ledger": MARK}, NOW - timedelta(days=60)) == [MARK]
    assert history.pruned_in({"ledger": MARK}, NOW - timedelta(days=20)) == []


def test_the_report_counts_pruned_apart_from_missing():
    runs = [ok(b) for b in range(31) if b != 5]
    rep = report.job_report(
        DAILY, history._compile(DAILY), runs, start=day(39) - timedelta(hours=3), end=NOW, now=NOW, pruned=MARK
    )
    assert rep.totals == {"succeeded": 30, "missing": 1, "pruned": 9}
    line = next(x for x in rep.lines if x.scheduled_at == day(35))
    assert (line.state, line.category) == ("pruned", "pruned") and "history kept 30 days" in line.explanation
