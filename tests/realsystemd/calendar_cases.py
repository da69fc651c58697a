"""OnCalendar= expressions for the differential fixture: every grammar form, and every timer
shipped by the Debian 12 packages below (their OnCalendar= lines, as the packages ship them).

`generate()` is deterministic: the same list every time, so the fixture regenerates the same.
"""

from __future__ import annotations

# (unit, expression) of the timers of Debian 12 packages: this machine's /lib/systemd/system
# (apt, dpkg, e2fsprogs, util-linux, logrotate, man-db, postgresql-common) and those of
# anacron, apt-listbugs, atop, borgmatic, btrfsmaintenance, certbot, exim4-base, fwupd,
# mdadm, ntpsec, pcp, php-common, plocate, sa-compile/spamassassin, snapper, sysstat and
# systemd-cron (read from their .deb files with `apt-get download` and `dpkg-deb -x`).
DEBIAN_TIMERS: tuple[tuple[str, str], ...] = (
    ("apt-daily.timer", "*-*-* 6,18:00"),
    ("apt-daily-upgrade.timer", "*-*-* 6:00"),
    ("dpkg-db-backup.timer", "daily"),
    ("e2scrub_all.timer", "Sun *-*-* 03:10:00"),
    ("fstrim.timer", "weekly"),
    ("logrotate.timer", "daily"),
    ("man-db.timer", "daily"),
    ("pg_basebackup@.timer", "weekly"),
    ("pg_compresswal@.timer", "daily"),
    ("pg_dump@.timer", "weekly"),
    ("anacron.timer", "*-*-* 07..23:30"),
    ("apt-listbugs.timer", "*-*-* *:20"),
    ("atop-rotate.timer", "daily"),
    ("borgmatic.timer", "daily"),
    ("btrfs-scrub.timer", "monthly"),
    ("certbot.timer", "*-*-* 00,12:00:00"),
    ("cron-daily.timer", "*-*-* 06:25:00"),
    ("cron-hourly.timer", "*-*-* *:17:00"),
    ("cron-monthly.timer", "*-*-1 06:52:00"),
    ("cron-weekly.timer", "Mon *-*-* 06:47:00"),
    ("cron-yearly.timer", "yearly"),
    ("exim4-base.timer", "daily"),
    ("fwupd-refresh.timer", "*-*-* *:00:00"),
    ("mdcheck_continue.timer", "1:05:00"),
    ("mdcheck_start.timer", "Sun *-*-1..7 1:00:00"),
    ("mdmonitor-oneshot.timer", "2:00:00"),
    ("ntpsec-rotate-stats.timer", "*-*-* 06:25:00"),
    ("phpsessionclean.timer", "*-*-* *:09,39:00"),
    ("plocate-updatedb.timer", "daily"),
    ("pmie_check.timer", "*-*-* *:28:00"),
    ("pmie_check.timer", "*-*-* *:58:00"),
    ("pmie_daily.timer", "*-*-* 00:08:00"),
    ("pmie_farm_check.timer", "*-*-* *:28:10"),
    ("pmlogger_check.timer", "*-*-* *:25:00"),
    ("pmlogger_daily.timer", "*-*-* 00:10:00"),
    ("pmlogger_farm_check.timer", "*-*-* *:55:10"),
    ("snapper-timeline.timer", "hourly"),
    ("spamassassin-maintenance.timer", "*-*-* 6:00"),
    ("sysstat-collect.timer", "*:00/10"),
    ("sysstat-summary.timer", "00:07:00"),
)

SHORTHANDS = (
    "minutely",
    "hourly",
    "daily",
    "weekly",
    "monthly",
    "yearly",
    "annually",
    "anually",
    "quarterly",
    "semiannually",
    "semi-annually",
    "biannually",
    "bi-annually",
    "DAILY",
    "Weekly",
)

WEEKDAYS = (
    "Mon",
    "monday",
    "Mon..Fri",
    "Mon-Fri",
    "Sat,Sun",
    "Mon,Wed..Fri",
    "Tue,",
    "Fri..Sun",
    "Wed,Sat..Sun",
    "SUNDAY",
)

DATES = (
    "*-*-*",
    "*-*-01",
    "*-*-1",
    "*-02-29",
    "*-*-31",
    "2027-*-*",
    "27-03-14",
    "2026..2028-*-01",
    "2026/2-01-01",
    "*-*-1/7",
    "*-*-1..7",
    "*-*-01..31/10",
    "*-1/3-01",
    "*-01,07-15",
    "*-*~01",
    "*-02~01",
    "*-*~01..03",
    "*-*~7/2",
    "*-05~07/1",
    "*-*~1,7",
    "03-14",
    "*-11-01",
    "2027-03-14",
    "2027-11-07",
    "*-*-13",
)

TIMES = (
    "00:00",
    "4:05",
    "*:*",
    "*:0/15",
    "*:00/10",
    "00/2:00",
    "08..17:00",
    "*:*:30",
    "*:*:0/20",
    "12:00:00",
    "02:30",
    "01:30",
    "02:00,30",
    "1:2:3",
    "23:59:59",
    "*:30",
    "0,12:00",
    "01..03:00",
    "02:*",
    "*:05/20:00",
)

ZONED = (
    "*-*-* 02:30 UTC",
    "daily UTC",
    "*-*-* 02:30 utc",
    "*-*-* 02:30:00 Europe/Berlin",
    "Mon *-*-* 09:00 America/New_York",
    "*-*-* 00:00 Asia/Kolkata",
    "*-*-* 02:15 Australia/Lord_Howe",
    "*-*-* 01:30 America/New_York",
    "*-*-* 12:00 EST",
    "*-*-* 12:00 EDT",
    "*-*-* 02:30 EST",
    "hourly Europe/London",
    "*-*-01 00:00 Pacific/Chatham",
    "*:0/30 America/St_Johns",
    "*-*-* 00:00 America/Santiago",
    "@1798761600",
    "@1830297600",
    "@0",
)

# systemd refuses each of these (checked by the run), and so must chrono
INVALID = (
    "",
    "bogus",
    "Fri..Mon",
    "Mon..",
    "*-*-* 25:00",
    "*-*-* 00:60",
    "*-13-01",
    "*-*-32",
    "*-*~29",
    "*-*-* 12",
    "*-*-* 12:00:00:00",
    "1969-01-01",
    "2200-01-01",
    "*-*-* *:*/0",
    "Mon Tue",
    "*-*-* 12:00 Nowhere/City",
    "*-*-1..7/40",
    "*-*~1-01",
)

# valid for systemd, refused by chrono (a reason a person accepts)
CHRONO_REFUSES = (
    "*:*:0.5",
    "*-*-* 12:00:00.250",
)


def generate() -> list[str]:
    """The valid expressions, in a fixed order, without repeats."""
    out: list[str] = []
    out += [expr for _, expr in DEBIAN_TIMERS]
    out += list(SHORTHANDS)
    for i, date in enumerate(DATES):  # each date with two times, and alone
        out += [date, f"{date} {TIMES[i % len(TIMES)]}", f"{date} {TIMES[(i * 7 + 3) % len(TIMES)]}"]
    for i, time in enumerate(TIMES):  # each time alone and with a date
        out += [time, f"{DATES[(i * 5 + 1) % len(DATES)]} {time}"]
    for i, day in enumerate(WEEKDAYS):  # each weekday form with dates and times
        out += [
            f"{day} *-*-* 00:00",
            f"{day} {DATES[(i * 3 + 2) % len(DATES)]} {TIMES[(i * 11 + 5) % len(TIMES)]}",
            f"{day} {TIMES[(i * 13 + 7) % len(TIMES)]}",
            f"{day} {DATES[(i * 7 + 9) % len(DATES)]}",
        ]
    for i, date in enumerate(DATES):  # a weekday on every date form
        out.append(f"{WEEKDAYS[i % len(WEEKDAYS)]} {date} {TIMES[(i * 3) % len(TIMES)]}")
    for i, time in enumerate(TIMES):  # every time with a weekday and the end of the month
        out.append(f"{WEEKDAYS[(i * 3 + 1) % len(WEEKDAYS)]} *-*~1..7 {time}")
    for i, date in enumerate(DATES):  # more times per date, and the zones the fixture runs in
        out += [f"{date} {TIMES[(i * 11 + 7) % len(TIMES)]}", f"{date} {TIMES[(i * 17 + 13) % len(TIMES)]}"]
    for i, time in enumerate(TIMES):
        out.append(f"{WEEKDAYS[(i * 7 + 4) % len(WEEKDAYS)]} {DATES[(i * 13 + 6) % len(DATES)]} {time}")
    out += list(ZONED)
    seen: set[str] = set()
    return [e for e in out if not (e in seen or seen.add(e))]
