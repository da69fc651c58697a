"""Every chronoctl command driven with extreme flag values: each gets an answer or a usage
error, never exit 70 ("a bug in chronoctl") and never a traceback.

Hypothesis draws the values (durations far beyond any calendar, dates at the ends of the
calendar and beyond with extreme offsets, huge, negative and non-finite numbers, raw text)
and the command they go to. CI runs a bounded number of examples; raise
CHRONO_HYPOTHESIS_EXAMPLES to run many more.
"""

from __future__ import annotations

import os
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronoctl.errors import EXIT_INTERNAL
from chronoctl.main import main
from chronod.core.model import JobSpec
from chronod.store.api import open_store

pytestmark = pytest.mark.xdist_group("cli_extremes")  # one worker: the world is built once per module

EXAMPLES = int(os.environ.get("CHRONO_HYPOTHESIS_EXAMPLES", "150"))
JOB = JobSpec(id="monthly", owner="ops", schedule="0 3 1 * *", command="true", idempotency_class="idempotent")
JOB_FILE = """\
jobs:
  - id: monthly
    owner: ops
    schedule: "0 3 1 * *"
    command: "true"
    idempotency_class: idempotent
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("extremes")
    registry = root / "jobs.d"
    registry.mkdir()
    (registry / "monthly.yaml").write_text(JOB_FILE)
    db = root / "chrono.db"
    store = open_store(f"sqlite:///{db}")
    try:
        store.upgrade()
        store.sync_jobs("web1", [JOB])
    finally:
        store.close()
    return {"db": str(db), "registry": str(registry)}


# --- extreme values ---------------------------------------------------------------------

units = st.sampled_from(["s", "m", "h", "d", "w", ""])
huge = st.one_of(st.integers(0, 10**40), st.sampled_from([0, 1, 10**15 - 1, 10**15, 10**16]))
durations = st.one_of(
    st.builds(lambda n, u: f"{n}{u}", huge, units),
    st.sampled_from(
        ["99999999999d", "0s", "-5m", "1h30m", "36600d", "36601d", "²s", "١٢s", "1e9s", "nan", "", "9" * 5000 + "d"]
    ),
    st.text(max_size=12),
)
offsets = st.integers(-24 * 60 + 1, 24 * 60 - 1).map(
    lambda m: ("-" if m < 0 else "+") + f"{abs(m) // 60:02d}:{abs(m) % 60:02d}"
)
instants = st.one_of(
    st.builds(
        lambda d, o: d.isoformat() + o,
        st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
        offsets,
    ),
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)).map(datetime.isoformat),
    st.dates().map(lambda d: d.isoformat()),
    st.sampled_from(
        [
            "9999-12-31T23:59:59Z",
            "0001-01-01",
            "0001-01-01T00:00:00+23:59",
            "9999-12-31T23:59:59-23:59",
            "1969-12-31T23:59:59Z",
            "9000-01-01T00:00:00Z",
            "8999-12-31",
            "10000-01-01",
            "",
            "now",
        ]
    ),
    st.text(max_size=20),
)
numbers = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e308", "-0", "0x10", ""]),
)
texts = st.text(max_size=30)


def _commands(w: dict[str, str]) -> st.SearchStrategy[list[str]]:
    db, reg = ["--db", w["db"]], ["--registry", w["registry"]]
    job = st.sampled_from(["monthly", "nope"])
    return st.one_of(
        st.builds(lambda j, d, n: ["runs", j, "--since", d, "--limit", n, *db], job, durations, numbers),
        st.builds(lambda j, t: ["did-it-run", j, "--at", t, *db], job, instants),
        st.builds(lambda j, d: ["did-it-run", j, "--since", d, *db], job, durations),
        st.builds(lambda d: ["missed", "--since", d, *db], durations),
        st.builds(lambda j, a, b: ["report", j, "--from", a, "--to", b, *db], job, instants, instants),
        st.builds(
            lambda a, b: ["report", "monthly", "--from", a, "--to", b, *reg, *db],
            st.sampled_from(["0001-01-01", "1970-01-01", "2026-01-01", "8999-01-01"]),
            st.sampled_from(["9999-12-31", "2026-12-31", "9000-01-01", "8999-12-31"]),
        ),
        st.builds(lambda j, t, n: ["next", j, "--after", t, "--count", n, *reg], job, instants, numbers),
        st.builds(
            lambda t: ["next", "--cron", "0 0 29 2 *", "--tz", "America/New_York", "--after", t, "--count", "10000"],
            instants,
        ),
        st.builds(lambda e, z, t: ["next", "--cron", e, "--tz", z, "--after", t], texts, texts, instants),
        st.builds(lambda j, t: ["explain", j, "--after", t, *reg], job, instants),
        st.builds(lambda t: ["explain", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--after", t], instants),
        st.builds(
            lambda w_, b, t, n: ["forecast", "--window", w_, "--bucket", b, "--from", t, "--top", n, *reg],
            durations,
            durations,
            instants,
            numbers,
        ),
        st.builds(lambda j, n: ["trigger", j, "--wait", n, *db], st.just("nope"), numbers),
        st.builds(lambda j, r: ["pause", j, "--reason", r, *db], st.just("nope"), texts),
    )


def _check(args: list[str], capsys) -> None:
    code = main(args)
    out, err = capsys.readouterr()
    assert code != EXIT_INTERNAL, f"chronoctl {args!r} exited 70: {err}"
    assert "Traceback" not in out + err, f"chronoctl {args!r} printed a traceback"
    assert code in (0, 1, 2, 3), f"chronoctl {args!r} exited {code}: {err}"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_flag_value_makes_chronoctl_fail_as_a_bug(world, capsys, data):
    _check(data.draw(_commands(world)), capsys)


# --- the cases reported, as written ------------------------------------------------------


@pytest.mark.parametrize(
    "args, flag",
    [
        (["runs", "monthly", "--since", "99999999999d"], "--since"),
        (["did-it-run", "monthly", "--at", "9999-12-31T23:59:59Z"], "--at"),
        (["report", "monthly", "--from", "0001-01-01", "--to", "9999-12-31"], "--from"),
    ],
)
def test_out_of_range_dates_and_durations_are_usage_errors_naming_the_flag_and_range(world, capsys, args, flag):
    code = main([*args, "--db", world["db"]])
    err = capsys.readouterr().err
    assert code == 2, err
    assert flag in err
    assert "1970-01-01" in err or "36600d" in err, err


def test_the_edges_of_the_range_still_answer(world, capsys):
    assert main(["did-it-run", "monthly", "--at", "1970-01-01T00:00:00Z", "--db", world["db"]]) in (0, 1)
    capsys.readouterr()
    # the schedule stops at the last instant chrono computes with, 9000-01-01, without an error
    assert main(["next", "--cron", "0 0 1 1 *", "--after", "8998-06-01T00:00:00Z", "--count", "5", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count('"scheduled_at"') == 2 and "9000-01-01T00:00:00" in out, out


def test_a_duration_with_more_digits_than_python_converts_is_a_usage_error(world, capsys):
    code = main(["missed", "--since", "9" * 5000 + "s", "--db", world["db"]])
    err = capsys.readouterr().err
    assert code == 2 and "--since" in err and "too large" in err


def test_a_runs_limit_beyond_what_the_database_counts_is_a_usage_error(world, capsys):
    code = main(["runs", "monthly", "--limit", str(2**63), "--db", world["db"]])
    err = capsys.readouterr().err
    assert code == 2 and "--limit" in err, err
