"""Clock changes: one table of hard cases, each reasoned out by hand from the zone's rules.

Rules (DESIGN §4, Vixie cron): a fixed-time job whose local time is skipped by a spring-forward
fires once at the transition instant; in a fall-back it fires in the first pass only.
Wildcard jobs (minute or hour starts with '*') skip missing times and fire in both passes.
A change of 3 hours or more is a clock correction: nothing caught up, nothing repeated.
A fixed-time job may choose its DST policy: `dst_gap` shift (cron) | skip, `dst_repeat`
first (cron) | last | both; the policy cases sit at the end of the table.

Expected values are local ISO strings with the offset in force, so the DST side is visible.
"""

from dataclasses import dataclass
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from chronod.core.schedule import compile_schedule

UTC = timezone.utc


@dataclass(frozen=True)
class Case:
    zone: str
    expr: str
    after: str  # UTC instant
    expected: tuple[str, ...]  # the next len(expected) fires, local time with offset
    why: str
    gap: str = "shift"  # dst_gap
    repeat: str = "first"  # dst_repeat

    def __str__(self):
        policy = "" if (self.gap, self.repeat) == ("shift", "first") else f" [{self.gap}/{self.repeat}]"
        return f"{self.zone} {self.expr!r}{policy} after {self.after}: {self.why}"

    def schedule(self):
        return compile_schedule(self.expr, self.zone, self.gap, self.repeat)


NY, BERLIN, LONDON, SYDNEY = "America/New_York", "Europe/Berlin", "Europe/London", "Australia/Sydney"

CASES = [
    # America/New_York transitions: 2026-03-08T07:00Z (02:00 EST -> 03:00 EDT),
    # 2026-11-01T06:00Z (02:00 EDT -> 01:00 EST), 2027-03-14T07:00Z, 2027-11-07T06:00Z.
    Case(
        NY,
        "30 2 * * *",
        "2026-11-01T00:00:00Z",
        ("2026-11-01T02:30:00-05:00", "2026-11-02T02:30:00-05:00"),
        "02:30 is after the repeated hour 01:00-02:00, so it fires once on 1 November",
    ),
    Case(
        NY,
        "30 2 * * *",
        "2027-03-13T12:00:00Z",
        ("2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"),
        "02:30 does not exist on 2027-03-14: fires at the transition, 03:00 EDT",
    ),
    Case(
        NY,
        "30 2 * * *",
        "2026-03-07T12:00:00Z",
        ("2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"),
        "the same on the 2026 spring-forward",
    ),
    Case(
        NY,
        "30 1 * * *",
        "2026-10-31T12:00:00Z",
        ("2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"),
        "fixed-time in the repeated hour: first pass (EDT) only",
    ),
    Case(
        NY,
        "30 1 * * *",
        "2027-11-06T12:00:00Z",
        ("2027-11-07T01:30:00-04:00", "2027-11-08T01:30:00-05:00"),
        "the same on the 2027 fall-back",
    ),
    Case(
        NY,
        "30 1 * * *",
        "2026-11-01T06:10:00Z",
        ("2026-11-02T01:30:00-05:00",),
        "starting inside the second pass (01:10 EST): 01:30 EST is not a fire, next is tomorrow",
    ),
    Case(
        NY,
        "*/30 1 * * *",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-02T01:00:00-05:00",
        ),
        "wildcard minute: both passes, in instant order",
    ),
    Case(
        NY,
        "*/30 1 * * *",
        "2026-11-01T05:45:00Z",
        ("2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:00:00-05:00"),
        "wildcard starting at 01:45 EDT (first pass): the second pass of 01:00 is still ahead",
    ),
    Case(
        NY,
        "0 * * * *",
        "2026-11-01T04:30:00Z",
        ("2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"),
        "hourly is wildcard: 01:00 fires twice",
    ),
    Case(
        NY,
        "0 * * * *",
        "2026-03-08T05:30:00Z",
        ("2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"),
        "hourly skips the missing 02:00, no catch-up",
    ),
    Case(
        NY,
        "*/15 2 * * *",
        "2026-03-07T12:00:00Z",
        ("2026-03-09T02:00:00-04:00", "2026-03-09T02:15:00-04:00"),
        "wildcard minute with a fixed hour: the whole missing hour is skipped, no extra 03:00 fire",
    ),
    Case(
        NY,
        "0,30 2 * * *",
        "2026-03-08T00:00:00Z",
        ("2026-03-08T03:00:00-04:00", "2026-03-08T03:00:01-04:00", "2026-03-09T02:00:00-04:00"),
        "two matches in one gap: each fires, one second apart from the transition (Debian cron runs both)",
    ),
    Case(
        NY,
        "0 2,3 * * *",
        "2026-03-08T00:00:00Z",
        ("2026-03-08T03:00:00-04:00", "2026-03-08T03:00:01-04:00", "2026-03-09T02:00:00-04:00"),
        "03:00 fires at 03:00; the skipped 02:00 takes the next free second",
    ),
    Case(
        NY,
        "0 2 8 3 *",
        "2026-01-01T00:00:00Z",
        ("2026-03-08T03:00:00-04:00", "2027-03-08T02:00:00-05:00"),
        "matching uses the skipped time's own date",
    ),
    Case(
        NY,
        "0 2 * * sun",
        "2026-03-07T00:00:00Z",
        ("2026-03-08T03:00:00-04:00", "2026-03-15T02:00:00-04:00"),
        "matching uses the skipped time's own weekday (Sunday)",
    ),
    # six fields (leading seconds) across the New York transitions
    Case(
        NY,
        "*/30 30 2 * * *",
        "2026-03-08T00:00:00Z",
        ("2026-03-08T03:00:00-04:00", "2026-03-08T03:00:01-04:00", "2026-03-09T02:30:00-04:00"),
        "02:30:00 and 02:30:30 are skipped: each fires, at 03:00:00 and 03:00:01 EDT",
    ),
    Case(
        NY,
        "*/20 59 1 * * *",
        "2026-11-01T05:58:00Z",
        (
            "2026-11-01T01:59:00-04:00",
            "2026-11-01T01:59:20-04:00",
            "2026-11-01T01:59:40-04:00",
            "2026-11-02T01:59:00-05:00",
        ),
        "seconds do not make a job wildcard: first pass only",
    ),
    Case(
        NY,
        "0 */30 1 * * *",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
        ),
        "six fields with a wildcard minute: both passes",
    ),
    # Europe/Berlin: 2026-03-29T01:00Z (02:00 CET -> 03:00 CEST), 2026-10-25T01:00Z (03:00 CEST -> 02:00 CET)
    Case(
        BERLIN,
        "30 2 * * *",
        "2026-03-28T12:00:00Z",
        ("2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"),
        "gap 02:00-03:00",
    ),
    Case(
        BERLIN,
        "30 2 * * *",
        "2026-10-24T12:00:00Z",
        ("2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"),
        "fold 02:00-03:00, first pass only",
    ),
    # Europe/London: 2026-03-29T01:00Z (01:00 GMT -> 02:00 BST)
    Case(
        LONDON,
        "30 1 * * *",
        "2026-03-28T12:00:00Z",
        ("2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"),
        "gap 01:00-02:00",
    ),
    # Europe/Dublin has negative DST in tzdata (IST is standard, GMT the "saving"):
    # 2026-03-29T01:00Z (01:00 GMT -> 02:00 IST), 2026-10-25T01:00Z (02:00 IST -> 01:00 GMT)
    Case(
        "Europe/Dublin",
        "30 1 * * *",
        "2026-10-24T12:00:00Z",
        ("2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00+00:00"),
        "fold 01:00-02:00, first pass only",
    ),
    Case(
        "Europe/Dublin",
        "30 1 * * *",
        "2026-03-28T12:00:00Z",
        ("2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"),
        "gap 01:00-02:00",
    ),
    # Australia/Sydney: 2026-04-04T16:00Z (03:00 AEDT -> 02:00 AEST), 2026-10-03T16:00Z (02:00 AEST -> 03:00 AEDT)
    Case(
        SYDNEY,
        "30 2 * * *",
        "2026-04-04T00:00:00Z",
        ("2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"),
        "southern autumn fold",
    ),
    Case(
        SYDNEY,
        "30 2 * * *",
        "2026-10-03T00:00:00Z",
        ("2026-10-04T03:00:00+11:00", "2026-10-05T02:30:00+11:00"),
        "southern spring gap",
    ),
    # America/Santiago: 2026-04-05T03:00Z (24:00 -03 -> 23:00 -04 on 4 April),
    # 2026-09-06T04:00Z (24:00 -04 on 5 September -> 01:00 -03 on 6 September)
    Case(
        "America/Santiago",
        "30 23 * * *",
        "2026-04-04T12:00:00Z",
        ("2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"),
        "fold 23:00-24:00, first pass only",
    ),
    Case(
        "America/Santiago",
        "0 0 * * *",
        "2026-09-05T12:00:00Z",
        ("2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"),
        "midnight does not exist on 6 September",
    ),
    # Australia/Lord_Howe moves by 30 minutes: 2026-04-04T15:00Z (02:00 +11 -> 01:30 +1030),
    # 2026-10-03T15:30Z (02:00 +1030 -> 02:30 +11)
    Case(
        "Australia/Lord_Howe",
        "15 2 * * *",
        "2026-10-03T00:00:00Z",
        ("2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"),
        "half-hour gap 02:00-02:30",
    ),
    Case(
        "Australia/Lord_Howe",
        "45 1 * * *",
        "2026-04-04T00:00:00Z",
        ("2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"),
        "half-hour fold 01:30-02:00",
    ),
    Case(
        "Australia/Lord_Howe",
        "*/15 1 * * *",
        "2026-04-04T13:30:00Z",
        (
            "2026-04-05T01:00:00+11:00",
            "2026-04-05T01:15:00+11:00",
            "2026-04-05T01:30:00+11:00",
            "2026-04-05T01:45:00+11:00",
            "2026-04-05T01:30:00+10:30",
            "2026-04-05T01:45:00+10:30",
            "2026-04-06T01:00:00+10:30",
        ),
        "wildcard: 01:30 and 01:45 fire in both passes",
    ),
    # Pacific/Chatham (+1245/+1345): 2026-04-04T14:00Z (03:45 -> 02:45), 2026-09-26T14:00Z (02:45 -> 03:45)
    Case(
        "Pacific/Chatham",
        "0 3 * * *",
        "2026-04-04T00:00:00Z",
        ("2026-04-05T03:00:00+13:45", "2026-04-06T03:00:00+12:45"),
        "fold 02:45-03:45, first pass only",
    ),
    Case(
        "Pacific/Chatham",
        "0 3 * * *",
        "2026-09-26T00:00:00Z",
        ("2026-09-27T03:45:00+13:45", "2026-09-28T03:00:00+13:45"),
        "gap 02:45-03:45: fires at 03:45",
    ),
    Case(
        "Pacific/Chatham",
        "45 2 * * *",
        "2026-09-26T00:00:00Z",
        ("2026-09-27T03:45:00+13:45", "2026-09-28T02:45:00+13:45"),
        "02:45 is the first skipped minute",
    ),
    # Europe/Moscow changed its rules: 2011-03-26T23:00Z (02:00 +03 -> 03:00 +04, then no more DST),
    # 2014-10-25T22:00Z (02:00 +04 -> 01:00 +03, permanent)
    Case(
        "Europe/Moscow",
        "30 2 * * *",
        "2011-03-26T00:00:00Z",
        ("2011-03-27T03:00:00+04:00", "2011-03-28T02:30:00+04:00"),
        "last spring-forward",
    ),
    Case(
        "Europe/Moscow",
        "30 2 * * *",
        "2011-10-29T12:00:00Z",
        ("2011-10-30T02:30:00+04:00", "2011-10-31T02:30:00+04:00"),
        "no fall-back in 2011",
    ),
    Case(
        "Europe/Moscow",
        "30 1 * * *",
        "2014-10-25T12:00:00Z",
        ("2014-10-26T01:30:00+04:00", "2014-10-27T01:30:00+03:00"),
        "the 2014 change back, first pass only",
    ),
    Case(
        "Europe/Moscow",
        "30 2 * * *",
        "2015-03-28T00:00:00Z",
        ("2015-03-29T02:30:00+03:00", "2015-03-30T02:30:00+03:00"),
        "no DST any more",
    ),
    # America/Sao_Paulo stopped DST in 2019: 2018-11-04T03:00Z (00:00 -03 -> 01:00 -02),
    # 2019-02-17T02:00Z (24:00 -02 -> 23:00 -03 on 16 February), none after
    Case(
        "America/Sao_Paulo",
        "30 0 * * *",
        "2018-11-03T12:00:00Z",
        ("2018-11-04T01:00:00-02:00", "2018-11-05T00:30:00-02:00"),
        "gap 00:00-01:00",
    ),
    Case(
        "America/Sao_Paulo",
        "30 23 * * *",
        "2019-02-16T12:00:00Z",
        ("2019-02-16T23:30:00-02:00", "2019-02-17T23:30:00-03:00"),
        "the last fold, first pass only",
    ),
    Case(
        "America/Sao_Paulo",
        "30 0 * * *",
        "2019-11-02T12:00:00Z",
        ("2019-11-03T00:30:00-03:00", "2019-11-04T00:30:00-03:00"),
        "no spring-forward in 2019",
    ),
    # America/Havana changes at midnight: 2026-03-08T05:00Z (24:00 -05 -> 01:00 -04 on 8 March),
    # 2026-11-01T05:00Z (01:00 -04 -> 00:00 -05: midnight happens twice on 1 November)
    Case(
        "America/Havana",
        "0 0 * * *",
        "2026-03-07T12:00:00Z",
        ("2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00"),
        "midnight does not exist on 8 March",
    ),
    Case(
        "America/Havana",
        "@daily",
        "2026-03-07T12:00:00Z",
        ("2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00"),
        "@daily is fixed-time: the same",
    ),
    Case(
        "America/Havana",
        "0 0 * * 0",
        "2026-03-01T12:00:00Z",
        ("2026-03-08T01:00:00-04:00", "2026-03-15T00:00:00-04:00"),
        "the skipped midnight is a Sunday's",
    ),
    Case(
        "America/Havana",
        "0 * * * *",
        "2026-03-08T03:30:00Z",
        ("2026-03-07T23:00:00-05:00", "2026-03-08T01:00:00-04:00", "2026-03-08T02:00:00-04:00"),
        "hourly skips the missing 00:00 across the date change",
    ),
    Case(
        "America/Havana",
        "0 0 * * *",
        "2026-10-31T12:00:00Z",
        ("2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00"),
        "the repeated midnight fires once",
    ),
    Case(
        "America/Havana",
        "*/30 0 * * *",
        "2026-10-31T12:00:00Z",
        (
            "2026-11-01T00:00:00-04:00",
            "2026-11-01T00:30:00-04:00",
            "2026-11-01T00:00:00-05:00",
            "2026-11-01T00:30:00-05:00",
            "2026-11-02T00:00:00-05:00",
        ),
        "wildcard: both passes of midnight",
    ),
    # Antarctica/Troll moves by two hours: 2026-03-29T01:00Z (01:00 +00 -> 03:00 +02),
    # 2026-10-25T01:00Z (03:00 +02 -> 01:00 +00)
    Case(
        "Antarctica/Troll",
        "0 1-3 * * *",
        "2026-03-28T12:00:00Z",
        ("2026-03-29T03:00:00+02:00", "2026-03-29T03:00:01+02:00", "2026-03-29T03:00:02+02:00"),
        "01:00 and 02:00 (skipped) and 03:00 (the end of the gap): three fires, one second apart",
    ),
    Case(
        "Antarctica/Troll",
        "30 0 2 * * *",
        "2026-03-28T12:00:00Z",
        ("2026-03-29T03:00:00+02:00", "2026-03-30T02:00:30+02:00"),
        "six fields: the collapsed fire is the transition instant, not second 30",
    ),
    Case(
        "Antarctica/Troll",
        "*/15 * * * *",
        "2026-03-29T00:40:00Z",
        ("2026-03-29T00:45:00+00:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:15:00+02:00"),
        "wildcard: two hours skipped, nothing caught up",
    ),
    Case(
        "Antarctica/Troll",
        "0 * * * *",
        "2026-10-24T22:30:00Z",
        (
            "2026-10-25T01:00:00+02:00",
            "2026-10-25T02:00:00+02:00",
            "2026-10-25T01:00:00+00:00",
            "2026-10-25T02:00:00+00:00",
            "2026-10-25T03:00:00+00:00",
        ),
        "two repeated hours, both passes",
    ),
    Case(
        "Antarctica/Troll",
        "30 1 * * *",
        "2026-10-24T12:00:00Z",
        ("2026-10-25T01:30:00+02:00", "2026-10-26T01:30:00+00:00"),
        "fixed-time: first pass only",
    ),
    # Africa/Casablanca drops to +00 for Ramadan: 2026-02-15T02:00Z (03:00 +01 -> 02:00 +00),
    # 2026-03-22T02:00Z (02:00 +00 -> 03:00 +01)
    Case(
        "Africa/Casablanca",
        "30 2 * * *",
        "2026-02-14T12:00:00Z",
        ("2026-02-15T02:30:00+01:00", "2026-02-16T02:30:00+00:00"),
        "Ramadan begins: fold, first pass",
    ),
    Case(
        "Africa/Casablanca",
        "30 2 * * *",
        "2026-03-21T12:00:00Z",
        ("2026-03-22T03:00:00+01:00", "2026-03-23T02:30:00+01:00"),
        "Ramadan ends: gap, fires at 03:00",
    ),
    # Asia/Gaza and Asia/Hebron: 2026-03-28T00:00Z (Saturday 02:00 +02 -> 03:00 +03),
    # 2026-10-23T23:00Z (Saturday 02:00 +03 -> 01:00 +02)
    Case(
        "Asia/Gaza",
        "15,45 2 * * 6",
        "2026-03-27T12:00:00Z",
        ("2026-03-28T03:00:00+03:00", "2026-03-28T03:00:01+03:00", "2026-04-04T02:15:00+03:00"),
        "two Saturday matches in the gap, two fires",
    ),
    Case(
        "Asia/Hebron",
        "30 1 * * *",
        "2026-10-23T12:00:00Z",
        ("2026-10-24T01:30:00+03:00", "2026-10-25T01:30:00+02:00"),
        "fold, first pass only",
    ),
    # America/Nuuk (and its old name America/Godthab) changes at 01:00Z, which is 23:00 local:
    # 2026-03-29T01:00Z (Saturday 23:00 -02 -> Sunday 00:00 -01), 2026-10-25T01:00Z (24:00 -01 -> 23:00 -02)
    Case(
        "America/Nuuk",
        "30 23 * * 6",
        "2026-03-27T12:00:00Z",
        ("2026-03-29T00:00:00-01:00", "2026-04-04T23:30:00-01:00"),
        "Saturday 23:30 does not exist: fires at Sunday 00:00, matched by the skipped time's weekday",
    ),
    Case(
        "America/Nuuk",
        "30 23 * * *",
        "2026-10-24T12:00:00Z",
        ("2026-10-24T23:30:00-01:00", "2026-10-25T23:30:00-02:00"),
        "23:00-24:00 repeats: first pass only",
    ),
    Case(
        "America/Godthab",
        "* 23 * * *",
        "2026-10-25T01:58:00Z",
        ("2026-10-24T23:59:00-02:00", "2026-10-25T23:00:00-02:00"),
        "wildcard, the end of the second pass",
    ),
    # Pacific/Apia skipped 30 December 2011: 2011-12-30T10:00Z (29 Dec 24:00 -10 -> 31 Dec 00:00 +14),
    # a 24-hour jump: a clock correction, nothing is caught up
    Case(
        "Pacific/Apia",
        "0 12 * * *",
        "2011-12-29T00:00:00Z",
        ("2011-12-29T12:00:00-10:00", "2011-12-31T12:00:00+14:00"),
        "30 December does not exist",
    ),
    Case(
        "Pacific/Apia",
        "30 12 30 12 *",
        "2011-06-01T00:00:00Z",
        ("2012-12-30T12:30:00+14:00",),
        "a job for 30 December is not caught up in 2011",
    ),
    Case(
        "Pacific/Apia",
        "0 * * * *",
        "2011-12-30T08:30:00Z",
        ("2011-12-29T23:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T01:00:00+14:00"),
        "hourly goes straight from 23:00 on the 29th to midnight on the 31st",
    ),
    # --- DST policy of fixed-time jobs: dst_gap (shift | skip), dst_repeat (first | last | both)
    Case(
        NY,
        "30 2 * * *",
        "2027-03-13T12:00:00Z",
        ("2027-03-15T02:30:00-04:00", "2027-03-16T02:30:00-04:00"),
        "skip: 02:30 does not exist on 2027-03-14, so nothing runs that day",
        gap="skip",
    ),
    Case(
        NY,
        "0 2,3 * * *",
        "2026-03-08T00:00:00Z",
        ("2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00", "2026-03-09T03:00:00-04:00"),
        "skip: 02:00 is dropped, 03:00 (which exists) still fires",
        gap="skip",
    ),
    Case(
        NY,
        "0,30 2 * * *",
        "2026-03-08T00:00:00Z",
        ("2026-03-09T02:00:00-04:00", "2026-03-09T02:30:00-04:00"),
        "skip: both matches in the gap are dropped",
        gap="skip",
    ),
    Case(
        "America/Havana",
        "0 0 * * *",
        "2026-03-07T12:00:00Z",
        ("2026-03-09T00:00:00-04:00",),
        "skip: the missing midnight is not run",
        gap="skip",
    ),
    Case(
        NY,
        "30 2 * * *",
        "2026-11-01T00:00:00Z",
        ("2026-11-01T02:30:00-05:00", "2026-11-02T02:30:00-05:00"),
        "skip changes nothing on a fall-back day",
        gap="skip",
    ),
    Case(
        NY,
        "30 1 * * *",
        "2026-11-01T00:00:00Z",
        ("2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"),
        "both: once in each pass, an hour apart",
        repeat="both",
    ),
    Case(
        NY,
        "30 1 * * *",
        "2026-11-01T00:00:00Z",
        ("2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"),
        "last: the second pass (EST) only",
        repeat="last",
    ),
    Case(
        NY,
        "30 1 * * *",
        "2026-11-01T05:45:00Z",
        ("2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"),
        "last, starting at 01:45 EDT (after the first pass): the second pass is still ahead",
        repeat="last",
    ),
    Case(
        NY,
        "30 1 * * *",
        "2026-11-01T06:10:00Z",
        ("2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"),
        "both, starting inside the second pass (01:10 EST): 01:30 EST is still ahead",
        repeat="both",
    ),
    Case(
        NY,
        "30 1 * * *",
        "2026-11-01T06:30:00Z",
        ("2026-11-02T01:30:00-05:00",),
        "last, starting at the second-pass fire: next is tomorrow",
        repeat="last",
    ),
    Case(
        NY,
        "0,30 1 * * *",
        "2026-11-01T05:10:00Z",
        (
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-02T01:00:00-05:00",
        ),
        "both, starting at 01:10 EDT: 01:00 EDT is behind, its second pass is not",
        repeat="both",
    ),
    Case(
        NY,
        "0,30 1 * * *",
        "2026-11-01T05:10:00Z",
        ("2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:00:00-05:00"),
        "last: both times in their second pass, in instant order",
        repeat="last",
    ),
    Case(
        NY,
        "30 1 * * *",
        "2026-03-07T12:00:00Z",
        ("2026-03-08T01:30:00-05:00", "2026-03-09T01:30:00-04:00"),
        "the repeat policy changes nothing on a day without a repeat",
        repeat="both",
    ),
    Case(
        BERLIN,
        "30 2 * * *",
        "2026-10-24T12:00:00Z",
        ("2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"),
        "both in Berlin: CEST, then CET",
        repeat="both",
    ),
    Case(
        "Australia/Lord_Howe",
        "45 1 * * *",
        "2026-04-04T00:00:00Z",
        ("2026-04-05T01:45:00+10:30", "2026-04-06T01:45:00+10:30"),
        "last across a half-hour fold",
        repeat="last",
    ),
    Case(
        "America/Havana",
        "0 0 * * *",
        "2026-10-31T12:00:00Z",
        ("2026-11-01T00:00:00-04:00", "2026-11-01T00:00:00-05:00", "2026-11-02T00:00:00-05:00"),
        "both: the repeated midnight fires twice",
        repeat="both",
    ),
    Case(
        NY,
        "*/30 1 * * *",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
        ),
        "a wildcard job keeps following the wall clock whatever its policy",
        gap="skip",
        repeat="first",
    ),
    Case(
        NY,
        "0 * * * *",
        "2026-03-08T05:30:00Z",
        ("2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00"),
        "wildcard with dst_gap shift: still no catch-up fire",
        gap="shift",
        repeat="last",
    ),
    Case(
        "Antarctica/Troll",
        "30 1 * * *",
        "2026-10-24T12:00:00Z",
        ("2026-10-25T01:30:00+02:00", "2026-10-25T01:30:00+00:00", "2026-10-26T01:30:00+00:00"),
        "a two-hour fall-back is a DST repeat too: both passes",
        repeat="both",
    ),
    Case(
        "Pacific/Apia",
        "0 12 * * *",
        "2011-12-29T00:00:00Z",
        ("2011-12-29T12:00:00-10:00", "2011-12-31T12:00:00+14:00"),
        "a clock correction keeps its rule whatever the policy",
        gap="skip",
        repeat="both",
    ),
]


def _next_fires(case: Case) -> list[str]:
    s = case.schedule()
    zone = ZoneInfo(case.zone)
    t = datetime.fromisoformat(case.after.replace("Z", "+00:00"))
    out = []
    for _ in case.expected:
        t = s.next_after(t)
        assert t.tzinfo is UTC
        out.append(t.astimezone(zone).isoformat())
    return out


@pytest.mark.parametrize("case", CASES, ids=str)
def test_fires_across_clock_changes_follow_vixie_cron(case):
    assert _next_fires(case) == list(case.expected), case.why


@pytest.mark.parametrize("case", CASES, ids=str)
def test_walking_backwards_finds_the_same_fires(case):
    s = case.schedule()
    expected = [datetime.fromisoformat(e).astimezone(UTC) for e in case.expected]
    for earlier, later in zip(expected, expected[1:]):
        assert s.prev_at_or_before(later) == later
        assert s.prev_at_or_before(later.replace(microsecond=0) - (later - earlier) / 2) == earlier


def _utc(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_dst_events_name_the_local_times_and_what_the_job_does_instead():
    events = compile_schedule("30 2 * * *", NY).dst_events(_utc("2026-01-01T00:00:00Z"), _utc("2028-01-01T00:00:00Z"))
    assert [(e.date, e.change, e.shift_s) for e in events] == [
        ("2026-03-08", "spring-forward", 3600),
        ("2027-03-14", "spring-forward", 3600),
    ]
    assert events[1].transition_at == _utc("2027-03-14T07:00:00Z")
    assert events[1].effect == "02:30 EST does not exist on 2027-03-14; fires once at 03:00 EDT instead"


def test_dst_events_for_the_repeated_hour():
    fixed = compile_schedule("30 1 * * *", NY).dst_events(_utc("2026-06-01T00:00:00Z"), _utc("2027-01-01T00:00:00Z"))
    assert [(e.date, e.change) for e in fixed] == [("2026-11-01", "fall-back")]
    assert "first time" in fixed[0].effect and "01:30" in fixed[0].effect
    wild = compile_schedule("*/30 1 * * *", NY).dst_events(_utc("2026-06-01T00:00:00Z"), _utc("2027-01-01T00:00:00Z"))
    assert "both passes" in wild[0].effect


def test_transitions_that_touch_no_fire_are_not_listed():
    assert (
        compile_schedule("0 12 * * *", NY).dst_events(_utc("2026-01-01T00:00:00Z"), _utc("2028-01-01T00:00:00Z")) == []
    )
    assert (
        compile_schedule("30 2 * * *", "UTC").dst_events(_utc("2026-01-01T00:00:00Z"), _utc("2028-01-01T00:00:00Z"))
        == []
    )


def test_the_apia_day_is_a_clock_correction():
    events = compile_schedule("0 12 * * *", "Pacific/Apia").dst_events(
        _utc("2011-12-01T00:00:00Z"), _utc("2012-01-01T00:00:00Z")
    )
    assert [(e.date, e.change, e.shift_s, e.transition_at) for e in events] == [
        ("2011-12-30", "clock-correction", 86400, _utc("2011-12-30T10:00:00Z"))
    ]
    assert "nothing is caught up" in events[0].effect


def test_dst_events_interval_is_half_open():
    s = compile_schedule("30 2 * * *", NY)
    t = _utc("2027-03-14T07:00:00Z")
    assert len(s.dst_events(t, _utc("2027-03-15T00:00:00Z"))) == 1
    assert s.dst_events(_utc("2027-03-01T00:00:00Z"), t) == []


def test_a_dense_wildcard_job_fires_every_matching_second_in_both_passes():
    # New York, 2026-11-01T06:00Z: 01:00-01:59:59 happens twice (EDT 05:00-06:00Z, EST 06:00-07:00Z)
    got = compile_schedule("*/2 * 1 * * *", NY).fires(_utc("2026-11-01T04:00:00Z"), _utc("2026-11-01T08:00:00Z"))
    expected = [
        _utc("2026-11-01T05:00:00Z") + i * (_utc("2026-11-01T00:00:02Z") - _utc("2026-11-01T00:00:00Z"))
        for i in range(3600)
    ]
    assert got == expected


def test_a_fixed_time_job_of_every_second_says_its_skipped_fires_have_no_second_left():
    # hours and minutes written "0,*" are fixed times to Debian's cron (they do not start with
    # "*"): each match the jump skips would run right after it, one second each, but this job
    # fires at every second after the jump anyway (a property test found the traceback)
    every = compile_schedule("* 0,* 0,* * * *", NY).dst_events(
        _utc("2027-03-14T00:00:00Z"), _utc("2027-03-15T00:00:00Z")
    )
    assert [(e.change, e.shift_s) for e in every] == [("spring-forward", 3600)]
    assert every[0].effect.endswith(
        "do not exist on 2027-03-14; its 3600 fires are skipped (the job fires at every second right after the jump anyway)"
    )
    # seconds 0-39 of every minute of 02:00-03:59: 2,400 skipped, 1,200 free seconds after the jump
    part = compile_schedule("0-39 0,* 2,3 * * *", NY).dst_events(
        _utc("2027-03-14T00:00:00Z"), _utc("2027-03-15T00:00:00Z")
    )
    assert "fires 1200 times right after the jump" in part[0].effect
    assert part[0].effect.endswith("; its 1200 fires are skipped (no second after the jump is free for them)")
