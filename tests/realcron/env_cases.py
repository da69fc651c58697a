"""Environment-line variants for the differential test against Debian's cron (pure, deterministic).

A case is a few crontab lines; the line `@JOB` stands where a job goes that records the
environment cron gave it. The runner (`tests/realcron/run_env_cases.py`) writes each case
into its own `/etc/cron.d` file (a line cron refuses voids only that file) plus one file
holding every case at once, runs the real daemon and stores what each job saw.
"""

from __future__ import annotations

from dataclasses import dataclass

JOB = "@JOB"
BLANKS = (" ", "\t", "  ", " \t ")
MAX = 998  # Debian cron keeps 998 characters of a line and of NAME=value


@dataclass(frozen=True)
class Case:
    id: str
    what: str  # in words, for the fixture reader
    lines: tuple[str, ...]


def _single(out: list[Case], prefix: str, what: str, line: str) -> None:
    out.append(Case(f"{prefix}{len(out):03d}", what, (line, JOB)))


def _blanks_around_unquoted(out: list[Case]) -> None:
    for b in BLANKS:
        label = repr(b)
        _single(out, "e", f"blanks {label} before the name", f"{b}UA=value")
        _single(out, "e", f"blanks {label} after the name", f"UA{b}=value")
        _single(out, "e", f"blanks {label} after '='", f"UA={b}value")
        _single(out, "e", f"blanks {label} after the value", f"UA=value{b}")
        _single(out, "e", f"blanks {label} inside the value", f"UA=va{b}lue")
        _single(out, "e", f"blanks {label} everywhere", f"{b}UA{b}={b}va{b}lue{b}")


def _blanks_around_quoted(out: list[Case]) -> None:
    for q in ("'", '"'):
        for b in BLANKS:
            label = repr(b)
            _single(out, "e", f"{q}-quoted, blanks {label} before the name", f"{b}QA={q}v w{q}")
            _single(out, "e", f"{q}-quoted, blanks {label} after the name", f"QA{b}={q}v w{q}")
            _single(out, "e", f"{q}-quoted, blanks {label} after '='", f"QA={b}{q}v w{q}")
            _single(out, "e", f"{q}-quoted, blanks {label} after the opening quote", f"QA={q}{b}v w{q}")
            _single(out, "e", f"{q}-quoted, blanks {label} before the closing quote", f"QA={q}v w{b}{q}")
            _single(out, "e", f"{q}-quoted, blanks {label} after the closing quote", f"QA={q}v w{q}{b}")
            _single(out, "e", f"{q}-quoted, blanks {label} on both sides inside", f"QA={q}{b}v w{b}{q}")


def _quoted_names(out: list[Case]) -> None:
    for line in (
        "'QN'=v",
        '"QN"=v',
        "'QN' = v",
        '"QN"="v"',
        "'QN'=\"v\"",
        "'QN\"=v",
        "\"QN'=v",
        "'QN=v",
        '"QN=v',
        "QN'=v",
        'QN"=v',
        "Q'N=v",
        'Q"N"=v',
        '"Q N"=v',
        "'Q N' = 'v w'",
        '"Q=N"=v',
        "''=v",
        '""=v',
        "=v",
        " = v",
        "'QN'x=v",
        '"QN" x=v',
        "'QN'\t=\tv",
        '"  QN  "=v',
        "Q\tN=v",
        "Q N=v",
    ):
        _single(out, "n", "a quoted or unusual name", line)
    for line in (
        "1A=v",
        "A-B=v",
        "A.B=v",
        "A$B=v",
        "A/B=v",
        "A:B=v",
        "\u00c9T\u00c9=v",
        "a=lower",
        "_=v",
        "__X=v",
        "A%B=v",
        "A\\B=v",
        "A#B=v",
        "#A=v",
        " #A=v",
    ):
        _single(out, "n", "a name of characters other than letters, digits and '_'", line)


def _hashes_and_equals(out: list[Case]) -> None:
    for line in (
        "HA=v#x",
        "HA=v #x",
        "HA=v # x  ",
        "HA=#x",
        "HA= #x",
        'HA="v # x"',
        "HA='a#b'",
        'HA="#"',
        'HA="v" #x',
        'HA="v"#x',
        "HA='v' # x",
        "HA=daily run # not a comment",
        "HA=v\t#\tx\t",
    ):
        _single(out, "h", "'#' inside or after a value", line)
    for line in (
        "EQ=a=b",
        "EQ==",
        "EQ===",
        "EQ = = ",
        'EQ="a=b"',
        "EQ=' = '",
        "EQ=a = b",
        "EQ==x",
        "EQ = =x",
        "EQ\t=\t=\t",
        "EQ='='",
        'EQ="="x',
    ):
        _single(out, "q", "'=' inside a value", line)


def _empty_values(out: list[Case]) -> None:
    for line in (
        "EM=",
        "EM= ",
        "EM=\t",
        "EM = ",
        'EM=""',
        "EM=''",
        'EM=" "',
        "EM=' '",
        'EM = ""',
        'EM=""x',
        'EM="" ',
        "EM=''\t",
        'EM= ""',
        "EM='\t'",
        'EM="  "  ',
        "MAILTO=",
        'MAILTO=""',
        "MAILTO=''",
        "MAILTO= ",
        'MAILTO=" "',
    ):
        _single(out, "m", "an empty (or blank) value", line)


def _unbalanced(out: list[Case]) -> None:
    for line in (
        'UB="abc',
        "UB='abc",
        'UB=abc"',
        "UB=abc'",
        "UB=\"abc''",
        "UB='a\"b'",
        'UB="a\'b"',
        'UB="a"b"',
        'UB="a" b',
        'UB="a"#c',
        'UB="a" #c',
        "UB='a''",
        'UB="""',
        'UB="a\\"b"',
        "UB='a\\'b'",
        'UB=a"b"c',
        "UB=a'b",
        'UB="',
        "UB='",
        'UB=" ',
        "UB='a' 'b'",
        'UB="a" "b"',
        "UB=\"a'",
        "UB='a\"",
        'UB=""a""',
        "UB= 'a' ",
        'UB=\t"a"\t',
        'UB="a\tb"\t',
        "UB=`a`",
        'UB=$"a"',
    ):
        _single(out, "u", "quotes that do not pair up, or text around them", line)


def _carriage_returns(out: list[Case]) -> None:
    for line in (
        "CR=v\r",
        'CR="v"\r',
        'CR="v\r"',
        "CR=v \r",
        "CR= \r",
        "CR=\r",
        '"CR"=v\r',
        "CR='v'\r",
        "CR=v\r\r",
        "CR=a\rb",
        "CR\r=v",
        "CR=\rv",
        "CR='v' \r",
        'CR="v\r" ',
        "CR=v\r ",
    ):
        _single(out, "r", "a carriage return", line)
    for line in ("VT=a\x0b", "VT=\x0ca", "VT='a\x0b'", "VT=a\x0bb"):
        _single(out, "r", "a vertical tab or form feed (blanks to isspace)", line)


def _long_values(out: list[Case]) -> None:
    for n in (990, 994, 995, 996, 997, 998, 999, 1000, 1100, 2000):
        _single(out, "l", f"an unquoted value of {n} characters", "L=" + "y" * n)
    for n in (990, 992, 993, 994, 995, 996):
        _single(out, "l", f"a double-quoted value of {n} characters", 'L="' + "y" * n + '"')
        _single(out, "l", f"a single-quoted value of {n} characters", "L='" + "y" * n + "'")
    for n in (990, 993, 994, 995, 996):
        _single(out, "l", f"a value of {n} characters ending in blanks", "L=" + "y" * n + "   ")
        _single(
            out, "l", f"a quoted value of {n} characters ending in blanks inside the quotes", 'L="' + "y" * n + '  "'
        )
    for lead in (1, 4, 10):
        _single(out, "l", f"{lead} blanks before a long setting", " " * lead + "L=" + "y" * 996)
    for name in (10, 100, 500):
        _single(out, "l", f"a name of {name} characters and a long value", "N" * name + "=" + "y" * (997 - name))
    _single(out, "l", "a long value with blanks after '='", "L=    " + "y" * 993)
    _single(out, "l", "a long value with blanks around '='", "L   =   " + "y" * 993)
    _single(out, "l", "a long quoted value with blanks around '='", 'L   =   "' + "y" * 985 + '"')


def _cron_settings(out: list[Case]) -> None:
    for line in (
        "SHELL=/bin/bash",
        "SHELL = /bin/bash  ",
        "SHELL='/bin/bash'",
        'SHELL="/bin/sh "',
        "SHELL=/bin/dash",
        "PATH=/opt/bin:/usr/bin:/bin",
        "PATH = /usr/local/bin:/usr/bin:/bin ",
        'PATH="/usr/bin:/bin  "',
        "PATH=$PATH:/opt/bin",
        "HOME=/tmp",
        "HOME = /tmp ",
        'HOME="/tmp "',
        "HOME=/",
        "HOME=/chrono-no-such-dir",
        "LOGNAME=someone",
        "LOGNAME=",
        'LOGNAME=""',
        "USER=someone",
        "MAILTO=root",
        "MAILTO = ops@example.com ",
        "MAILTO='a@b, c@d'",
        "CRON_TZ=Europe/Paris",
        "CRON_TZ = America/New_York ",
        "TZ=Asia/Tokyo",
        "TZ=",
        "LANG=C.UTF-8",
        "LC_ALL=C",
        "CONTENT_TYPE=text/plain; charset=utf-8",
        "MAILFROM=cron@here",
        "CRON_CORRECT_MAIL_HEADER=1",
        "LANG=POSIX",
        "CHRONOENV_PAM=from-crontab",
        "CHRONO_JOB_ID=x",
        "RANDOM_DELAY=5",
        "PWD=/var",
        "SHLVL=7",
        "TERM=xterm",
    ):
        _single(out, "s", "a setting cron or the shell gives a meaning to", line)


def _sequences(out: list[Case]) -> None:
    seqs: list[tuple[str, tuple[str, ...]]] = [
        ("a setting changed after a job", ("SEQ=one", JOB, "SEQ=two")),
        ("a setting repeated, last wins", ("SEQ=one", "SEQ=two", JOB)),
        ("quoted and unquoted spellings of one name", ("SEQ='a b '", JOB, '"SEQ"= c ', JOB)),
        ("PATH changed part-way", ("PATH=/a:/usr/bin:/bin", JOB, "PATH=/b:/usr/bin:/bin", JOB)),
        ("SHELL changed part-way", ("SHELL=/bin/bash", JOB, "SHELL=/bin/sh", JOB)),
        ("HOME changed part-way", (JOB, "HOME=/tmp", JOB, "HOME=/", JOB)),
        ("MAILTO changed part-way", ("MAILTO=a", JOB, 'MAILTO=""', JOB)),
        ("CRON_TZ changed part-way", ("CRON_TZ=Europe/Paris", JOB, "CRON_TZ=UTC", JOB)),
        ("TZ then CRON_TZ", ("TZ=Asia/Tokyo", JOB, "CRON_TZ=Europe/Paris", JOB)),
        ("LOGNAME set part-way", (JOB, "LOGNAME=x", JOB)),
        ("a comment and a blank line between settings", ("SEQ=a", "# SEQ=b", "", "   ", "\t# x", "SEQ2=c", JOB)),
        ("an indented comment that looks like a setting", ("  # SEQ=hidden", "SEQ=seen", JOB)),
        ("a setting after the last job", (JOB, "SEQ=late")),
        ("many settings before one job", tuple(f"S{i}=v{i}" for i in range(40)) + (JOB,)),
        ("a setting whose name differs in case", ("seq=lower", "SEQ=upper", JOB)),
        ("a quoted name then the same name unquoted", ("'SEQ'=q", "SEQ = u ", JOB)),
        ("a CR setting then a plain one", ("SEQ=a\r", "SEQ2=b", JOB)),
        ("a long value then a short one", ("SEQ=" + "y" * 1500, JOB, "SEQ=short", JOB)),
    ]
    for what, lines in seqs:
        out.append(Case(f"p{len(out):03d}", what, lines))


def _products(out: list[Case]) -> None:
    values = ("a b", "a#b", "a=b", "", " ", "a'b", 'a"b', "  a  ")
    for q in ("", "'", '"'):
        for v in values:
            for tail in ("", " ", "\t"):
                if not q and tail == "\t":
                    continue
                _single(out, "x", f"value {v!r} quoted with {q or 'nothing'!r}, then {tail!r}", f"PV={q}{v}{q}{tail}")


def generate() -> list[Case]:
    """Every case, in a fixed order with stable ids."""
    out: list[Case] = []
    for part in (
        _blanks_around_unquoted,
        _blanks_around_quoted,
        _quoted_names,
        _hashes_and_equals,
        _empty_values,
        _unbalanced,
        _carriage_returns,
        _long_values,
        _cron_settings,
        _sequences,
        _products,
    ):
        part(out)
    out[:0] = [
        Case("b", "no settings: what cron gives every job", (JOB,)),
        Case(
            "k",
            "a file whose quoted values end in blanks",
            ("GREETING='  hello world  '", 'DQ="  two  "', "UNQ=abc   ", "NOTE=daily run # not a comment", JOB),
        ),
    ]
    return [Case(f"{c.id[0]}{i:03d}", c.what, c.lines) for i, c in enumerate(out)]


if __name__ == "__main__":
    for case in generate():
        print(case.id, case.what, [line for line in case.lines])
