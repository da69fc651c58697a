"""Job files as plain data -> validated, frozen JobSpecs, with every problem located.

Pure: no I/O and no clock reads (`now` is an argument). `chronod.specfile` turns YAML
into a `SpecDocument` (values plus the line of every field path); this module applies
the one table of field rules, `FIELDS`, that `chronod.core.jsonschema` and the manual
page `chrono-jobs(5)` are also derived from or checked against. docs/reference.md.
"""

from __future__ import annotations

import difflib
import functools
import operator
import re
import zoneinfo
from dataclasses import dataclass, field
from dataclasses import fields as dc_fields
from datetime import date, datetime, timedelta, timezone
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from chronod.core.blackout import Window, wall_to_utc
from chronod.core.bounds import DAY_S, MAX_EVERY_S, MAX_RUN_S, MAX_SPAN_S
from chronod.core.durations import DurationError, parse_duration
from chronod.core.model import (
    CATCHUP_POLICIES,
    DST_GAP_POLICIES,
    DST_REPEAT_POLICIES,
    IDEMPOTENCY_CLASSES,
    NOTIFY_EVENTS,
    OVERLAP_POLICIES,
    JobSpec,
    Notify,
    Resource,
    Retry,
    RunOn,
    spec_of,
)
from chronod.core.retention import DEFAULT_HISTORY_DAYS
from chronod.core.schedule import ScheduleError, compile_schedule

ERROR = "error"
WARNING = "warning"

# Bounds (docs/reference.md, What a root daemon accepts): a job file is configuration, not a data store.
MAX_JOBS_PER_FILE = 10_000
MAX_ENV_ENTRIES = 256
MAX_COMMAND_CHARS = 64 * 1024
MAX_COMMAND_ARGS = 4096
MAX_STRING_CHARS = 4096
MAX_NOTIFY_ROUTES = 32
MAX_TAGS = 64
MAX_RESOURCES = 1024
DST_LOOKAHEAD = timedelta(days=366)
MAX_HISTORY_DAYS = MAX_SPAN_S // DAY_S  # the longest period a report covers

TOP_LEVEL_KEYS = ("jobs", "defaults", "resources", "blackouts")
MAX_BLACKOUTS = 256
BLACKOUT_POLICIES = ("skip", "defer")


@dataclass(frozen=True)
class Problem:
    """One thing wrong (or worth a look) in a job file, located down to the field.

    `path` is the field path in the file (`jobs[2].retry.attempts`); `line` is 1-based,
    0 when the problem concerns the whole file; `job_id` is set when the job has a usable id.
    """

    severity: str  # ERROR | WARNING
    file: str
    line: int
    job_id: str | None
    path: str
    message: str
    hint: str = ""

    def format(self) -> str:
        """`file:line: error: job 'x': retry.attempts: must be ≥ 1 (hint: ...)`."""
        where = f"{self.file}:{self.line}" if self.line else (self.file or "<input>")
        subject, path = "", self.path
        if self.job_id is not None:
            subject = f"job {self.job_id!r}: "
            path = re.sub(r"^jobs\[\d+\]\.?", "", path)
        text = f"{where}: {self.severity}: {subject}{path + ': ' if path else ''}{self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text

    def to_json_dict(self) -> dict[str, Any]:
        """Stable keys for `--json` output."""
        return {
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "job_id": self.job_id,
            "path": self.path,
            "message": self.message,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class SpecDocument:
    """A job file's contents as plain values, and where each value was written.

    `lines` maps field paths (`jobs[0].retry`) to 1-based lines. `plain` maps the path of
    every unquoted scalar that YAML did NOT read as a string to its text as written, so
    that `schedule: 12:30` (read as 750) can be reported with a hint to quote it.
    `problems` carries what the YAML layer already found (duplicate keys).
    """

    file: str
    data: Any
    lines: Mapping[str, int] = field(default_factory=dict)
    plain: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class FileValidation:
    """What one document validates to: its good jobs, its resources, every problem."""

    jobs: tuple[JobSpec, ...]
    resources: Mapping[str, Resource]
    problems: tuple[Problem, ...]
    blackouts: tuple[Window, ...] = ()

    @property
    def ok(self) -> bool:
        """True when there is no error (warnings allowed)."""
        return not any(p.severity == ERROR for p in self.problems)


def path_key(parent: str, key: str) -> str:
    """The path of mapping entry `key` under `parent` (shared with chronod.specfile)."""
    return f"{parent}.{key}" if parent else str(key)


def path_index(parent: str, index: int) -> str:
    """The path of list item `index` under `parent`."""
    return f"{parent}[{index}]"


class _Invalid:
    def __repr__(self) -> str:
        return "INVALID"


INVALID: Any = _Invalid()  # a value already reported as wrong; checks that need it stay quiet


class _Ctx:
    """Collects problems for one document and knows the line of every path."""

    def __init__(self, doc: SpecDocument):
        self.doc = doc
        self.problems: list[Problem] = list(doc.problems)
        self.job_id: str | None = None
        # counted as reported: recounting the list per job made a file's validation quadratic
        self.errors = sum(p.severity == ERROR for p in self.problems)

    def line(self, path: str) -> int:
        while path:
            if path in self.doc.lines:
                return self.doc.lines[path]
            path = re.sub(r"(\[\d+\]|\.[^.\[]*|^[^.\[]*)$", "", path)
        return self.doc.lines.get("", 0)

    def report(self, severity: str, path: str, message: str, hint: str = "") -> None:
        self.problems.append(Problem(severity, self.doc.file, self.line(path), self.job_id, path, message, hint))
        if severity == ERROR:
            self.errors += 1

    def error(self, path: str, message: str, hint: str = "") -> Any:
        self.report(ERROR, path, message, hint)
        return INVALID

    def warn(self, path: str, message: str, hint: str = "") -> None:
        self.report(WARNING, path, message, hint)

    def error_count(self) -> int:
        return self.errors


def _last_key(path: str) -> str:
    return re.split(r"[.\[]", path)[-1].rstrip("]")


def _yaml_reading(value: Any, raw: str) -> str:
    if value is None:
        return "null (no value)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int) and ":" in raw:
        return f"the base-60 number {value}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, (date, datetime)):
        return f"the date {value.isoformat()}"
    return type(value).__name__


_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "a mapping"}
    return names.get(type(value), f"a {type(value).__name__}")


def _wrong_type(value: Any, expected: str, path: str, ctx: _Ctx) -> Any:
    raw = ctx.doc.plain.get(path)
    if raw is not None and expected.endswith("string"):
        key = _last_key(path)
        shown = f'- "{raw}"' if path.endswith("]") else f'{key}: "{raw}"'
        if value is None:
            return ctx.error(
                path, "has no value", f'give it a value, or delete the line; to mean the text "{raw}", write {shown}'
            )
        return ctx.error(
            path,
            f"must be {expected}, but YAML reads the unquoted {raw} as {_yaml_reading(value, raw)}",
            f"quote it: {shown}",
        )
    if value is None:
        return ctx.error(path, f"has no value; it must be {expected}", "give it a value, or delete the line")
    return ctx.error(path, f"must be {expected}, not {_type_name(value)}")


def _did_you_mean(word: str, choices: tuple[str, ...] | list[str], aliases: Mapping[str, str] | None = None) -> str:
    if aliases and word.lower() in aliases:
        return f"did you mean {aliases[word.lower()]!r}?"
    close = difflib.get_close_matches(str(word).lower(), list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


# --- value types -------------------------------------------------------------------------


class _Type:
    """A kind of value: checks one value (reporting problems) and describes itself as JSON Schema."""

    doc = ""

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class Str(_Type):
    """A string with bounds, and optionally a pattern or a meaning (path, URL, zone)."""

    max_len: int = MAX_STRING_CHARS
    min_len: int = 1
    pattern: str | None = None
    pattern_hint: str = ""
    absolute: bool = False
    url: bool = False
    zone: bool = False
    doc: str = "string"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if not isinstance(value, str):
            return _wrong_type(value, "a string", path, ctx)
        if "\x00" in value:
            return ctx.error(path, "contains a NUL character, which no command or file name can carry")
        if len(value.strip()) < self.min_len:
            return ctx.error(path, "must not be empty")
        if len(value) > self.max_len:
            return ctx.error(path, f"is {len(value)} characters long; the limit is {self.max_len}")
        if self.pattern and not re.fullmatch(self.pattern, value):
            return ctx.error(path, f"{value!r} is not allowed: {self.pattern_hint}", self._pattern_fix(value))
        if self.absolute and not value.startswith("/"):
            return ctx.error(
                path, f"{value!r} must be an absolute path", f"start it with '/', e.g. /{value.lstrip('./')}"
            )
        if self.url:
            return self._check_url(value, path, ctx)
        if self.zone:
            return _check_zone(value, path, ctx)
        return value

    def _pattern_fix(self, value: str) -> str:
        fixed = re.sub(r"[^a-z0-9._-]+", "-", value.lower()).strip("-._")[:63]
        if self.pattern == ID_PATTERN and fixed and re.fullmatch(ID_PATTERN, fixed):
            return f"for example {fixed!r}"
        return ""

    def _check_url(self, value: str, path: str, ctx: _Ctx) -> Any:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc or re.search(r"\s", value):
            return ctx.error(
                path, f"{value!r} is not an http(s) URL", "write the full address, e.g. https://alerts.example.com/hook"
            )
        return value

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string", "minLength": self.min_len, "maxLength": self.max_len}
        if self.pattern:
            out["pattern"] = f"^(?:{self.pattern})$"
        if self.absolute:
            out["pattern"] = "^/"
        if self.url:
            out["pattern"] = "^https?://[^\\s/]+"
            out["format"] = "uri"
        return out


def _check_zone(value: str, path: str, ctx: _Ctx) -> Any:
    if value == "localtime" or value.startswith("/") or ".." in value:
        return ctx.error(path, f"{value!r} is not an IANA time zone name", "name the zone, e.g. Europe/Paris or UTC")
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        close = difflib.get_close_matches(value, sorted(zoneinfo.available_timezones()), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "use an IANA name such as America/New_York or UTC"
        return ctx.error(path, f"unknown time zone {value!r}", hint)
    return value


@dataclass(frozen=True)
class Int(_Type):
    """A whole number within bounds (booleans and durations like '15m' are refused)."""

    minimum: int = 0
    maximum: int = 10**9
    doc: str = "int"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if isinstance(value, str):
            if value.strip().isdigit():
                return ctx.error(
                    path, f"must be a number, not the string {value!r}", f"remove the quotes: {value.strip()}"
                )
            try:
                seconds = parse_duration(value)
            except DurationError:
                seconds = None
            if seconds is not None and path.endswith("_s"):
                return ctx.error(path, f"must be a number of seconds, not {value!r}", f"write {seconds}")
            if _EXPONENT.fullmatch(value.strip()):  # YAML 1.1 reads 1e308 as text (its floats need a dot)
                return ctx.error(
                    path,
                    f"must be a whole number written in digits, not {value!r}",
                    f"write it in digits, at most {self.maximum}",
                )
        if isinstance(value, float):
            return ctx.error(
                path, f"must be a whole number, not {value}", f"write {int(value)}" if value.is_integer() else ""
            )
        if isinstance(value, bool) or not isinstance(value, int):
            return _wrong_type(value, "a whole number", path, ctx)
        if value < self.minimum:
            return ctx.error(path, f"must be ≥ {self.minimum}, not {value}")
        if value > self.maximum:
            return ctx.error(path, f"must be ≤ {self.maximum}, not {value}")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}


@dataclass(frozen=True)
class Bool(_Type):
    """true or false."""

    doc: str = "bool"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if not isinstance(value, bool):
            return _wrong_type(value, "true or false", path, ctx)
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


@dataclass(frozen=True)
class Enum(_Type):
    """One of a fixed set of words."""

    choices: tuple[str, ...] = ()

    @property
    def doc(self) -> str:  # type: ignore[override]
        return " | ".join(self.choices)

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if not isinstance(value, str):
            return _wrong_type(value, "one of " + ", ".join(self.choices) + " (a string)", path, ctx)
        if value not in self.choices:
            hint = _did_you_mean(value, self.choices) or "choose one of " + ", ".join(self.choices)
            return ctx.error(path, f"{value!r} is not one of {', '.join(self.choices)}", hint)
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.choices)}


@dataclass(frozen=True)
class Command(_Type):
    """A string (run by the shell) or a list of strings (exec'd directly, no shell)."""

    doc: str = "string or list of strings"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if isinstance(value, str):
            return Str(max_len=MAX_COMMAND_CHARS).check(value, path, ctx)
        if not isinstance(value, list):
            return _wrong_type(value, "a string (run by the shell) or a list of strings (exec'd)", path, ctx)
        if not value:
            return ctx.error(
                path, "is an empty list", "give the program and its arguments, e.g. [/usr/bin/backup, --full]"
            )
        if len(value) > MAX_COMMAND_ARGS:
            return ctx.error(path, f"has {len(value)} arguments; the limit is {MAX_COMMAND_ARGS}")
        items = [
            Str(max_len=MAX_COMMAND_CHARS, min_len=1 if i == 0 else 0).check(v, path_index(path, i), ctx)
            for i, v in enumerate(value)
        ]
        if any(v is INVALID for v in items):
            return INVALID
        if sum(len(v) for v in items) > MAX_COMMAND_CHARS:
            return ctx.error(path, f"is longer than {MAX_COMMAND_CHARS} characters in all")
        return tuple(items)

    def schema(self) -> dict[str, Any]:
        return {
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": MAX_COMMAND_CHARS},
                {"type": "array", "minItems": 1, "maxItems": MAX_COMMAND_ARGS, "items": {"type": "string"}},
            ]
        }


@dataclass(frozen=True)
class StrList(_Type):
    """A list of items of one type (strings or words)."""

    item: _Type = field(default_factory=Str)
    min_items: int = 0
    max_items: int = 64
    doc: str = "list of strings"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if not isinstance(value, list):
            return _wrong_type(value, "a list", path, ctx)
        if len(value) < self.min_items:
            return ctx.error(path, f"must list at least {self.min_items}")
        if len(value) > self.max_items:
            return ctx.error(path, f"has {len(value)} items; the limit is {self.max_items}")
        items = [self.item.check(v, path_index(path, i), ctx) for i, v in enumerate(value)]
        return INVALID if any(v is INVALID for v in items) else tuple(dict.fromkeys(items))

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "minItems": self.min_items, "maxItems": self.max_items, "items": self.item.schema()}


ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


@dataclass(frozen=True)
class EnvMap(_Type):
    """Environment variables for the run: NAME -> string; CHRONO_* names are chrono's own."""

    doc: str = "mapping of NAME to string"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if not isinstance(value, dict):
            return _wrong_type(value, "a mapping of NAME: value", path, ctx)
        if len(value) > MAX_ENV_ENTRIES:
            return ctx.error(path, f"has {len(value)} entries; the limit is {MAX_ENV_ENTRIES}")
        before, out = ctx.error_count(), []
        for name, v in value.items():
            at = path_key(path, name)
            if not re.fullmatch(ENV_NAME, str(name)):
                ctx.error(
                    at, f"{name!r} is not a variable name", "use letters, digits and '_', not starting with a digit"
                )
            elif str(name).upper().startswith("CHRONO_"):
                ctx.error(at, f"{name} is set by chrono for every run and cannot be overridden", "choose another name")
            out.append((str(name), Str(max_len=32 * 1024, min_len=0).check(v, at, ctx)))
        return tuple(sorted(out)) if ctx.error_count() == before else INVALID

    def schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "maxProperties": MAX_ENV_ENTRIES,
            "propertyNames": {"pattern": f"^{ENV_NAME}$", "not": {"pattern": "^[Cc][Hh][Rr][Oo][Nn][Oo]_"}},
            "additionalProperties": {"type": "string"},
        }


@dataclass(frozen=True)
class Field:
    """One key of a job (or of a nested mapping): its type, default, and rule in words.

    `default` is the value when the key is absent (None where validation computes it or
    there is none); `default_doc` and `rule` are what the JSON Schema and man page say.
    """

    name: str
    type: _Type
    default: Any = None
    required: bool = False
    nullable: bool = False
    default_doc: str = ""
    rule: str = ""


@dataclass(frozen=True)
class Obj(_Type):
    """A mapping with known keys; `build` turns the checked values into a model object."""

    fields: tuple[Field, ...] = ()
    build: Callable[[dict[str, Any]], Any] = dict
    post: Callable[[dict[str, Any], str, _Ctx], bool] | None = None
    aliases: Mapping[str, str] = field(default_factory=dict)
    exactly_one_of: tuple[str, ...] = ()  # for the schema; `post` enforces it
    doc: str = "mapping"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if not isinstance(value, dict):
            return _wrong_type(value, "a mapping", path, ctx)
        before = ctx.error_count()
        _unknown_keys(value, tuple(f.name for f in self.fields), path, ctx, self.aliases)
        out = {}
        for f in self.fields:
            at = path_key(path, f.name)
            if f.name in value:
                out[f.name] = None if (f.nullable and value[f.name] is None) else f.type.check(value[f.name], at, ctx)
            elif f.required:
                out[f.name] = ctx.error(path, f"{f.name} is required", f"add {f.name}: ({f.rule or f.type.doc})")
            else:
                out[f.name] = f.default
        if self.post and ctx.error_count() == before:
            self.post(out, path, ctx)
        return self.build(out) if ctx.error_count() == before else INVALID

    def schema(self) -> dict[str, Any]:
        out = {
            "type": "object",
            "properties": {f.name: field_schema(f) for f in self.fields},
            "required": [f.name for f in self.fields if f.required],
            "additionalProperties": False,
        }
        if self.exactly_one_of:
            out["oneOf"] = [{"required": [name]} for name in self.exactly_one_of]
        return out


@dataclass(frozen=True)
class ObjList(_Type):
    """A list of mappings of one shape."""

    item: Obj = field(default_factory=Obj)
    max_items: int = 32
    doc: str = "list of mappings"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if not isinstance(value, list):
            return _wrong_type(value, "a list", path, ctx)
        if len(value) > self.max_items:
            return ctx.error(path, f"has {len(value)} items; the limit is {self.max_items}")
        items = [self.item.check(v, path_index(path, i), ctx) for i, v in enumerate(value)]
        return INVALID if any(v is INVALID for v in items) else tuple(items)

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "maxItems": self.max_items, "items": self.item.schema()}


NODE_GLOB = r"[A-Za-z0-9_.*?\[\]!-]{1,255}"
_NODES = Obj(
    fields=(
        Field(
            "nodes",
            StrList(
                Str(pattern=NODE_GLOB, pattern_hint="node globs use letters, digits, . _ - and * ? [ ]"), min_items=1
            ),
            required=True,
        ),
    ),
    build=lambda d: RunOn(mode="any", nodes=d["nodes"]),
)


@dataclass(frozen=True)
class RunOnType(_Type):
    """`any` (once per fleet), `each` (every node), or `{nodes: [glob, ...]}`."""

    doc: str = "any | each | {nodes: [glob, ...]}"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if isinstance(value, dict):
            return _NODES.check(value, path, ctx)
        checked = Enum(("any", "each")).check(value, path, ctx)
        return INVALID if checked is INVALID else RunOn(mode=checked)

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [{"type": "string", "enum": ["any", "each"]}, _NODES.schema()]}


def field_schema(f: Field) -> dict[str, Any]:
    """The JSON Schema of one field, with its rule and default as description."""
    out = dict(f.type.schema())
    if f.nullable:
        out = {"anyOf": [out, {"type": "null"}]}
    if f.rule:
        out["description"] = f.rule + (f" Default: {f.default_doc}." if f.default_doc else "")
    if f.default is not None and isinstance(f.default, (str, int, bool)):
        out["default"] = f.default
    return out


def _retry_post(d: dict[str, Any], path: str, ctx: _Ctx) -> bool:
    if d["backoff_s"] > d["max_backoff_s"]:
        ctx.error(
            path_key(path, "backoff_s"),
            f"{d['backoff_s']} is larger than max_backoff_s ({d['max_backoff_s']})",
            "raise max_backoff_s or lower backoff_s",
        )
        return False
    return True


def _notify_post(d: dict[str, Any], path: str, ctx: _Ctx) -> bool:
    given = [k for k in ("command", "webhook") if d.get(k) is not None]
    if len(given) != 1:
        what = "both command and webhook" if given else "neither command nor webhook"
        ctx.error(
            path,
            f"has {what}; a route has exactly one",
            "split it into two routes, one with command:, one with webhook:" if given else "add command: or webhook:",
        )
        return False
    return True


RETRY_FIELDS = (
    Field("attempts", Int(1, 100), 1, default_doc="1", rule="total attempts; 1 means no retry"),
    Field("backoff_s", Int(0, 86400), 10, default_doc="10", rule="delay before the second attempt, doubled each time"),
    Field("max_backoff_s", Int(0, 7 * 86400), 3600, default_doc="3600", rule="upper bound of the delay"),
)
NOTIFY_FIELDS = (
    Field(
        "on",
        StrList(Enum(NOTIFY_EVENTS), min_items=1, max_items=len(NOTIFY_EVENTS)),
        required=True,
        rule="events: " + ", ".join(NOTIFY_EVENTS),
    ),
    Field("command", Command(), nullable=True, rule="a command run when one of the events happens"),
    Field("webhook", Str(url=True, max_len=2048), nullable=True, rule="an http(s) URL that is notified of the events"),
    Field("timeout_s", Int(1, 300), 10, default_doc="10", rule="how long one notification may take"),
)
RESOURCE_FIELDS = (
    Field("max_concurrency", Int(1, 100_000), required=True, rule="at most this many jobs of the group run at once"),
)

ID_PATTERN = r"[a-z0-9][a-z0-9._-]{0,62}"
NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?"
RESOURCE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"
TAG_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,62}"

FIELDS: tuple[Field, ...] = (
    Field(
        "id",
        Str(
            max_len=63,
            pattern=ID_PATTERN,
            pattern_hint="lowercase letters, digits, '.', '_', '-', starting with a letter or digit, at most 63",
        ),
        required=True,
        rule="unique across the registry; [a-z0-9][a-z0-9._-]{0,62}",
    ),
    Field("owner", Str(max_len=256), required=True, rule="the team that is paged for failures"),
    Field(
        "schedule",
        Str(max_len=256),
        required=True,
        rule="cron expression (5 fields, or 6 with leading seconds), @daily and friends, @every DURATION, "
        "@calendar EXPR[; EXPR...] (systemd OnCalendar=), or @reboot",
    ),
    Field("command", Command(), required=True, rule="a string is run by shell; a list is exec'd directly, no shell"),
    Field(
        "idempotency_class",
        Enum(IDEMPOTENCY_CLASSES),
        required=True,
        rule="idempotent: re-running is harmless; keyed: dedupes on CHRONO_RUN_ID; unsafe: at most once",
    ),
    Field(
        "timezone", Str(max_len=64, zone=True), "UTC", default_doc="UTC", rule="IANA zone name the schedule is read in"
    ),
    Field(
        "dst_gap",
        Enum(DST_GAP_POLICIES),
        "shift",
        default_doc="shift",
        rule="fixed-time jobs whose local time a spring-forward skips: shift fires each skipped time when the clock jumps, one second apart (cron); skip does not run that day",
    ),
    Field(
        "dst_repeat",
        Enum(DST_REPEAT_POLICIES),
        "first",
        default_doc="first",
        rule="fixed-time jobs whose local time a fall-back repeats: first pass (cron), last pass, or both (each its own occurrence and run id)",
    ),
    Field(
        "blackout",
        Enum(BLACKOUT_POLICIES),
        "skip",
        default_doc="skip",
        rule="an occurrence inside a maintenance window (blackouts:): skip records skipped_blackout; defer runs it once when the window ends (catch-up rules apply)",
    ),
    Field(
        "tolerance_s",
        Int(0, 86400),
        None,
        default_doc="min(300, 10% of the smallest gap between occurrences)",
        rule="jitter window in seconds; must be smaller than the smallest gap",
    ),
    Field(
        "tolerance_reason",
        Str(max_len=1024),
        nullable=True,
        default_doc="none",
        rule="why the job must start exactly on time; expected with tolerance_s: 0",
    ),
    Field(
        "overlap",
        Enum(OVERLAP_POLICIES),
        "forbid",
        default_doc="forbid",
        rule="what to do when the previous run is still going",
    ),
    Field(
        "catchup",
        Enum(CATCHUP_POLICIES),
        "latest",
        default_doc="latest",
        rule="what to do with occurrences missed while nothing could run them",
    ),
    Field(
        "catchup_window_s",
        Int(0, MAX_RUN_S),
        86400,
        default_doc="86400",
        rule="occurrences older than this are never run late",
    ),
    Field(
        "timeout_s",
        Int(1, MAX_RUN_S),
        None,
        nullable=True,
        default_doc="none",
        rule="SIGTERM to the process group after this many seconds",
    ),
    Field("kill_grace_s", Int(0, 3600), 10, default_doc="10", rule="SIGKILL this long after SIGTERM"),
    Field(
        "retry",
        Obj(RETRY_FIELDS, build=lambda d: Retry(**d), post=_retry_post),
        Retry(),
        default_doc="{attempts: 1}",
        rule="{attempts, backoff_s, max_backoff_s}; attempts > 1 not allowed for unsafe jobs",
    ),
    Field(
        "max_silence_s",
        Int(1, MAX_EVERY_S),
        None,
        default_doc="2 × the largest gap + tolerance_s",
        rule="dead man's switch: alert when no success for this long",
    ),
    Field(
        "run_on",
        RunOnType(),
        RunOn(),
        default_doc="any",
        rule="any: once per fleet; each: on every node; {nodes: [glob]}: once, on a matching node",
    ),
    Field(
        "user",
        Str(pattern=NAME_PATTERN, pattern_hint="a user name"),
        nullable=True,
        default_doc="the daemon's user",
        rule="only a root daemon switches users",
    ),
    Field(
        "group",
        Str(pattern=NAME_PATTERN, pattern_hint="a group name"),
        nullable=True,
        default_doc="the user's primary group",
        rule="group to run as",
    ),
    Field("workdir", Str(absolute=True), "/", default_doc="/", rule="absolute directory the command starts in"),
    Field(
        "env",
        EnvMap(),
        (),
        default_doc="{}",
        rule=f"extra variables, NAME: string; at most {MAX_ENV_ENTRIES}; CHRONO_* is reserved",
    ),
    Field(
        "shell",
        Str(absolute=True, max_len=1024),
        "/bin/sh",
        default_doc="/bin/sh",
        rule="absolute path of the shell that runs a string command",
    ),
    Field(
        "stdin",
        Str(max_len=MAX_COMMAND_CHARS, min_len=0),
        nullable=True,
        default_doc="none (empty)",
        rule="text given to the command on standard input",
    ),
    Field(
        "resource",
        Str(pattern=RESOURCE_PATTERN, pattern_hint="a name from resources:"),
        nullable=True,
        default_doc="none",
        rule="a concurrency group declared under resources: in the same file",
    ),
    Field(
        "notify",
        ObjList(
            Obj(NOTIFY_FIELDS, build=lambda d: Notify(**d), post=_notify_post, exactly_one_of=("command", "webhook")),
            MAX_NOTIFY_ROUTES,
        ),
        (),
        default_doc="[]",
        rule="routes: {on: [events], command: ... | webhook: URL}",
    ),
    Field(
        "tags",
        StrList(Str(max_len=63, pattern=TAG_PATTERN, pattern_hint="letters, digits and . _ : / -"), max_items=MAX_TAGS),
        (),
        default_doc="[]",
        rule="labels; compliance requires an explicit max_silence_s and a notify",
    ),
    Field("output_limit_kb", Int(1, 16384), 64, default_doc="64", rule="the tail of output kept per run, in KiB"),
    Field(
        "history_days",
        Int(1, MAX_HISTORY_DAYS),
        DEFAULT_HISTORY_DAYS,
        default_doc=str(DEFAULT_HISTORY_DAYS),
        rule="runs older than this many days are pruned (the latest success is kept); set it for a whole file under defaults:",
    ),
    Field("description", Str(min_len=0), "", default_doc='""', rule="what the job is for"),
    Field("enabled", Bool(), True, default_doc="true", rule="false keeps the job defined but never fires it"),
)
FIELDS_BY_NAME = {f.name: f for f in FIELDS}
_FIELD_NAMES = tuple(FIELDS_BY_NAME)
_FIELD_INDEX = {f.name: i for i, f in enumerate(FIELDS)}
_ID_RE = re.compile(ID_PATTERN)
RESOURCE = Obj(RESOURCE_FIELDS)

# Keys people bring from other schedulers; difflib cannot guess these.
KEY_ALIASES = {
    "tz": "timezone",
    "cron": "schedule",
    "cmd": "command",
    "run": "command",
    "name": "id",
    "team": "owner",
    "retries": "retry",
    "cwd": "workdir",
    "dir": "workdir",
    "environment": "env",
    "timeout": "timeout_s",
    "tolerance": "tolerance_s",
    "jitter": "tolerance_s",
    "concurrency": "overlap",
    "disabled": "enabled",
    "labels": "tags",
}


def _unknown_keys(
    value: dict[str, Any], allowed: tuple[str, ...], path: str, ctx: _Ctx, aliases: Mapping[str, str] | None = None
) -> None:
    for key in value:
        if key not in allowed:
            hint = _did_you_mean(str(key), allowed, aliases) or "known keys: " + ", ".join(allowed)
            ctx.error(path_key(path, str(key)), f"unknown key {key!r}", hint)


# --- the document ------------------------------------------------------------------------


def validate_document(doc: SpecDocument, *, now: datetime) -> FileValidation:
    """Validate one job file's data. Every problem is reported, each with file, line and path.

    `now` (aware) anchors the look-ahead for DST warnings; nothing else reads time.
    """
    if now.tzinfo is None:
        raise ValueError("validate_document needs an aware `now`")
    ctx = _Ctx(doc)
    data = doc.data
    if not isinstance(data, dict):
        ctx.error(
            "", f"a job file must be a mapping with a jobs: list, not {_type_name(data)}", "start the file with 'jobs:'"
        )
        return FileValidation((), {}, tuple(ctx.problems))
    _unknown_keys(data, TOP_LEVEL_KEYS, "", ctx)
    resources = _resources(data.get("resources"), ctx) if "resources" in data else {}
    defaults = _defaults(data["defaults"], ctx) if "defaults" in data else {}
    jobs = _jobs(data, defaults, resources, ctx, now)
    windows = _blackouts(data.get("blackouts"), ctx) if "blackouts" in data else ()
    return FileValidation(tuple(jobs), resources, tuple(sorted(ctx.problems, key=lambda p: p.line)), windows)


def _resources(value: Any, ctx: _Ctx) -> dict[str, Resource]:
    if not isinstance(value, dict):
        _wrong_type(value, "a mapping of name: {max_concurrency: N}", "resources", ctx)
        return {}
    if len(value) > MAX_RESOURCES:
        ctx.error("resources", f"declares {len(value)} groups; the limit is {MAX_RESOURCES}")
        return {}
    out = {}
    for name, spec in value.items():
        at = path_key("resources", name)
        if not re.fullmatch(RESOURCE_PATTERN, str(name)):
            ctx.error(at, f"{name!r} is not a resource name", "letters, digits, '.', '_', '-', at most 63")
            continue
        checked = RESOURCE.check(spec, at, ctx)
        if checked is not INVALID:
            out[name] = Resource(name=name, max_concurrency=checked["max_concurrency"])
    return out


def _defaults(value: Any, ctx: _Ctx) -> dict[str, Any]:
    if not isinstance(value, dict):
        _wrong_type(value, "a mapping of job fields", "defaults", ctx)
        return {}
    allowed = tuple(f.name for f in FIELDS if f.name != "id")
    out = {}
    for key, v in value.items():
        at = path_key("defaults", key)
        if key == "id":
            ctx.error(at, "id cannot have a default", "every job names itself with its own id:")
        elif key not in allowed:
            ctx.error(
                at, f"unknown key {key!r}", _did_you_mean(str(key), allowed, KEY_ALIASES) or "defaults take job fields"
            )
        else:
            f = FIELDS_BY_NAME[key]
            out[key] = (None if (f.nullable and v is None) else f.type.check(v, at, ctx), at)
    return out


def _jobs(
    data: dict[str, Any], defaults: dict[str, Any], resources: dict[str, Any], ctx: _Ctx, now: datetime
) -> list[JobSpec]:
    if "jobs" not in data:
        ctx.error("", "a job file needs a top-level jobs: list", "add 'jobs:' followed by '- id: ...' entries")
        return []
    items = data["jobs"]
    if items is None:
        return []
    if not isinstance(items, list):
        _wrong_type(items, "a list of jobs", "jobs", ctx)
        return []
    if len(items) > MAX_JOBS_PER_FILE:
        ctx.error(
            "jobs",
            f"lists {len(items)} jobs; the limit is {MAX_JOBS_PER_FILE} per file",
            "split the jobs across several files",
        )
        return []
    specs: list[JobSpec] = []
    first_seen: dict[str, Any] = {}
    base = _Base(defaults)
    for i, item in enumerate(items):
        spec = _job(item, path_index("jobs", i), base, resources, ctx, now)
        job_id = item.get("id") if isinstance(item, dict) else None
        if isinstance(job_id, str):
            if job_id in first_seen:
                ctx.job_id = job_id
                ctx.error(
                    path_key(path_index("jobs", i), "id"),
                    f"id {job_id!r} is already used at line {first_seen[job_id]}",
                    "ids are unique across the registry; rename one",
                )
                continue
            first_seen[job_id] = ctx.line(path_key(path_index("jobs", i), "id"))
        if spec is not None:
            specs.append(spec)
    ctx.job_id = None
    return specs


@dataclass
class _Job:
    """A job while it is being validated: checked values and the path each came from."""

    path: str
    values: dict[str, Any]
    source: dict[str, str]  # field -> path it was written at (the job or defaults)
    explicit: set[str]  # fields written in the job or in defaults
    schedule: Any = None

    def at(self, name: str) -> str:
        return self.source.get(name, self.path)


class _Base:
    """What every job of a file starts from: the value of each field it leaves out (the
    file's defaults, else the field's default), worked out once per file. With 100,000 jobs
    walking all the fields for each job was a third of the validation."""

    def __init__(self, defaults: dict[str, Any]):
        self.defaults = defaults
        self.values: dict[str, Any] = {}
        self.source: dict[str, str] = {}
        for f in FIELDS:
            if f.name in defaults:
                self.values[f.name], self.source[f.name] = defaults[f.name]
            else:
                self.values[f.name] = f.default
        self.explicit = frozenset(self.source)
        # required fields without a default: each job must write them
        self.required = tuple(i for i, f in enumerate(FIELDS) if f.required and f.name not in defaults)


def _job(item: Any, path: str, base: _Base, resources: dict[str, Any], ctx: _Ctx, now: datetime) -> JobSpec | None:
    ctx.job_id = None
    if not isinstance(item, dict):
        _wrong_type(item, "a mapping (a job: id, owner, schedule, ...)", path, ctx)
        return None
    raw_id = item.get("id")
    if isinstance(raw_id, str) and _ID_RE.fullmatch(raw_id):
        ctx.job_id = raw_id
    before = ctx.error_count()
    _unknown_keys(item, _FIELD_NAMES, path, ctx, KEY_ALIASES)
    job = _Job(path, dict(base.values), dict(base.source), set(base.explicit))
    # the fields the job writes, and the required ones it leaves out, in the order of FIELDS
    # (the order their problems are reported in)
    visit = [_FIELD_INDEX[k] for k in item if k in _FIELD_INDEX]
    visit += [i for i in base.required if FIELDS[i].name not in item]
    visit.sort()
    for i in visit:
        f = FIELDS[i]
        job.values[f.name] = _field_value(f, item, path, base.defaults, job, ctx)
    for rule in JOB_RULES:
        rule(job, resources, ctx, now)
    # `in` compares by identity first and INVALID equals nothing else: a C loop, not a generator
    if ctx.error_count() > before or INVALID in job.values.values():
        return None
    return _build(job, ctx)


def _field_value(f: Field, item: dict[str, Any], path: str, defaults: dict[str, Any], job: _Job, ctx: _Ctx) -> Any:
    if f.name in item:
        at = path_key(path, f.name)
        job.source[f.name] = at
        job.explicit.add(f.name)
        value = item[f.name]
        return None if (f.nullable and value is None) else f.type.check(value, at, ctx)
    if f.name in defaults:
        value, at = defaults[f.name]
        job.source[f.name] = at
        job.explicit.add(f.name)
        return value
    if f.required:
        return ctx.error(path, f"{f.name} is required", f"add {f.name}: ({f.rule})")
    return f.default


# the spec's fields in order, read from a job's values (FIELDS, and the three below)
_SPEC_VALUES = operator.itemgetter(*(f.name for f in dc_fields(JobSpec)))


def _build(job: _Job, ctx: _Ctx) -> JobSpec:
    """The job's spec: `JobSpec(**values)` made as `spec_of` makes it, at half the cost."""
    values = job.values  # the job's own, no longer read
    values["max_silence_explicit"] = "max_silence_s" in job.explicit
    values["source_file"] = ctx.doc.file
    values["source_line"] = ctx.line(job.path)
    return spec_of(_SPEC_VALUES(values))


# --- rules across fields (each reports its own problems) -------------------------------------


def _rule_schedule(job: _Job, resources: dict[str, Any], ctx: _Ctx, now: datetime) -> None:
    expr, tz = job.values["schedule"], job.values["timezone"]
    if expr is INVALID:
        return
    gap, repeat = job.values["dst_gap"], job.values["dst_repeat"]
    try:
        job.schedule = compile_schedule(
            expr,
            tz if tz is not INVALID else "UTC",
            "shift" if gap is INVALID else gap,
            "first" if repeat is INVALID else repeat,
        )
    except ScheduleError as e:
        job.values["schedule"] = ctx.error(job.at("schedule"), e.message, e.hint)


def _rule_tolerance(job: _Job, resources: dict[str, Any], ctx: _Ctx, now: datetime) -> None:
    tolerance = job.values["tolerance_s"]
    gap = job.schedule.min_gap_s() if job.schedule is not None else None
    if tolerance is None:
        job.values["tolerance_s"] = min(300, gap // 10) if gap else 0
        return
    if tolerance is INVALID or gap is None:
        return
    if tolerance >= gap:
        ctx.error(
            job.at("tolerance_s"),
            f"{tolerance} is not smaller than the smallest gap between occurrences ({gap}s)",
            f"use at most {gap - 1}, or leave it out for the default of {min(300, gap // 10)}",
        )
    elif tolerance == 0 and job.values["tolerance_reason"] is None:
        ctx.warn(
            job.at("tolerance_s"),
            "is 0 without a tolerance_reason",
            "say why the job must start exactly on time: tolerance_reason: ...",
        )


def _rule_retry(job: _Job, resources: dict[str, Any], ctx: _Ctx, now: datetime) -> None:
    retry = job.values["retry"]
    if job.values["idempotency_class"] == "unsafe" and isinstance(retry, Retry) and retry.attempts > 1:
        ctx.error(
            path_key(job.at("retry"), "attempts"),
            f"is {retry.attempts}, but an unsafe job runs at most once and is never retried",
            "make the job dedupe on CHRONO_RUN_ID and declare idempotency_class: keyed, or remove retry:",
        )


def _rule_max_silence(job: _Job, resources: dict[str, Any], ctx: _Ctx, now: datetime) -> None:
    silence, tolerance = job.values["max_silence_s"], job.values["tolerance_s"]
    gap = job.schedule.max_gap_s() if job.schedule is not None else None
    if silence is None:
        if gap is not None and isinstance(tolerance, int):
            job.values["max_silence_s"] = 2 * gap + tolerance
        return
    if silence is not INVALID and gap is not None and silence < gap:
        ctx.warn(
            job.at("max_silence_s"),
            f"{silence}s is shorter than the largest gap between occurrences ({gap}s): the silence alert will fire between normal runs",
            f"use at least {gap + (tolerance if isinstance(tolerance, int) else 0)}",
        )


def _rule_compliance(job: _Job, resources: dict[str, Any], ctx: _Ctx, now: datetime) -> None:
    tags = job.values["tags"]
    if tags is INVALID or "compliance" not in tags:
        return
    if "max_silence_s" not in job.explicit:
        ctx.error(
            job.at("tags"),
            "a compliance job needs an explicit max_silence_s",
            "add max_silence_s: the longest the job may go without succeeding",
        )
    if not job.values["notify"]:
        ctx.error(
            job.at("tags"),
            "a compliance job needs a notify route",
            "add notify: [{on: [failed, lost, silence], command: ...}]",
        )


def _rule_resource(job: _Job, resources: dict[str, Any], ctx: _Ctx, now: datetime) -> None:
    name = job.values["resource"]
    if name is None or name is INVALID or name in resources:
        return
    hint = _did_you_mean(name, tuple(resources)) or (
        f"declare it: resources: {{{name}: {{max_concurrency: 1}}}}"
        if not resources
        else "declared here: " + ", ".join(sorted(resources))
    )
    ctx.error(job.at("resource"), f"{name!r} is not declared under resources: in this file", hint)


_POLICY_FOR_CHANGE = {"spring-forward": "dst_gap", "fall-back": "dst_repeat"}
_POLICY_HINT = {
    "dst_gap": "choose what it does: dst_gap: shift (once when the clock jumps, as cron) or dst_gap: skip (not that day)",
    "dst_repeat": "choose what it does: dst_repeat: first (as cron), last, or both (once in each pass)",
}


def _rule_dst(job: _Job, resources: dict[str, Any], ctx: _Ctx, now: datetime) -> None:
    """Warn for a fixed-time job whose time a clock change skips or repeats, unless the job
    says what it wants there (dst_gap, dst_repeat); a clock correction is always named."""
    sched = job.schedule
    if sched is None or sched.kind != "cron":
        _warn_unused_policy(job, "it has no clock times" if sched is not None else "", ctx)
        return
    if not sched.is_fixed_time:
        _warn_unused_policy(job, "a wildcard schedule follows the wall clock through DST changes", ctx)
        return
    for event in _dst_events(sched, now):
        policy = _POLICY_FOR_CHANGE.get(event.change)
        if policy in job.explicit:
            continue
        ctx.warn(
            job.at("schedule"),
            f"daylight saving time in {sched.tz} ({event.change}): {event.effect}",
            _POLICY_HINT[policy]
            if policy
            else "if that matters, schedule outside the hours the clocks change, or use timezone: UTC",
        )


def _warn_unused_policy(job: _Job, why: str, ctx: _Ctx) -> None:
    """A DST policy written in the job itself on a schedule it cannot apply to (defaults stay quiet)."""
    if not why:
        return
    for name in ("dst_gap", "dst_repeat"):
        if job.source.get(name, "").startswith(job.path + "."):
            ctx.warn(job.at(name), f"has no effect on schedule {job.values['schedule']!r}: {why}", f"remove {name}")


@functools.lru_cache(maxsize=4096)
def _dst_events(sched: Any, now: datetime) -> tuple[Any, ...]:
    """The DST events of a fixed-time schedule in the look-ahead from `now`.

    Cached: `compile_schedule` hands out one object per (expression, zone) and a registry
    load validates every file with the same `now`, so a schedule shared by thousands of
    jobs is scanned once.
    """
    if not _near_a_transition(sched, now):
        return ()
    return tuple(sched.dst_events(now, now + DST_LOOKAHEAD))


def _near_a_transition(sched: Any, now: datetime) -> bool:
    """Whether the schedule fires in or right after an interval a clock change skips or repeats.

    A cheap filter in front of `dst_events`, which scans the whole year per schedule: a
    file of thousands of jobs must validate in seconds, and most jobs fire nowhere near
    the hours the clocks change.
    """
    end = now + DST_LOOKAHEAD
    for at, shift_s in _zone_transitions(sched.tz, now.date()):
        if not now <= at < end:
            continue
        # A clock correction (3 hours or more) drops fires instead of moving them: ask always.
        if shift_s >= 3 * 3600:
            return True
        start = at - timedelta(seconds=shift_s + 1)
        if _hours_near(sched, start, shift_s) and _days_near(sched, start, shift_s) and sched.fires(start, at, limit=1):
            return True
    return False


def _hours_near(sched: Any, start: datetime, shift_s: int) -> bool:
    """Whether the schedule's hour field allows a wall-clock hour a fire in (start, start +
    shift + 1 s] can match. Most fixed-time jobs fail this cheap test; `fires` costs a
    search per job."""
    fields = getattr(sched, "fields", None)
    return fields is None or not _wall_hours(sched.tz, start, shift_s).isdisjoint(fields.hours)


def _days_near(sched: Any, start: datetime, shift_s: int) -> bool:
    """Whether the schedule's day fields allow a wall-clock day of those same hours: most
    fixed-time jobs the hour test lets through (02:30 on the 15th) fail this one, and are
    spared the search of `fires`."""
    fields = getattr(sched, "fields", None)
    if fields is None:
        return True
    return any(
        month in fields.months and fields.day_matches(dom, dow)
        for month, dom, dow in _wall_days(sched.tz, start, shift_s)
    )


@functools.lru_cache(maxsize=256)
def _wall_days(tz: str, start: datetime, shift_s: int) -> tuple[tuple[int, int, int], ...]:
    """(month, day of the month, cron weekday: 0 = Sunday) of each wall-clock day that the
    hours of `_wall_hours` fall on."""
    wall = start.astimezone(zoneinfo.ZoneInfo(tz)).replace(tzinfo=None)
    days = dict.fromkeys((wall + timedelta(hours=k)).date() for k in range(-1, 2 * shift_s // 3600 + 4))
    return tuple((d.month, d.day, (d.weekday() + 1) % 7) for d in days)


@functools.lru_cache(maxsize=256)
def _wall_hours(tz: str, start: datetime, shift_s: int) -> frozenset[int]:
    """The wall-clock hours from the wall time at `start` to past the skipped or repeated
    interval (a gap's shifted times included), with an hour to spare on each side."""
    wall = start.astimezone(zoneinfo.ZoneInfo(tz)).replace(tzinfo=None)
    return frozenset((wall + timedelta(hours=k)).hour for k in range(-1, 2 * shift_s // 3600 + 4))


@functools.lru_cache(maxsize=256)
def _zone_transitions(tz: str, day: date) -> tuple[tuple[datetime, int], ...]:
    """(UTC instant, size in seconds) of each offset change of `tz` in the 368 days from `day`."""
    zone = zoneinfo.ZoneInfo(tz)
    start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
    found, before = [], start.astimezone(zone).utcoffset()
    for n in range(1, 369):
        t = start + timedelta(days=n)
        after = t.astimezone(zone).utcoffset()
        if after != before:
            lo, hi = int(t.timestamp()) - 86400, int(t.timestamp())
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if datetime.fromtimestamp(mid, zone).utcoffset() == after else (mid, hi)
            assert after is not None and before is not None  # aware datetimes in a zone
            found.append((datetime.fromtimestamp(hi, timezone.utc), int(abs((after - before).total_seconds()))))
            before = after
    return tuple(found)


JOB_RULES: tuple[Callable[[_Job, dict[str, Any], _Ctx, datetime], None], ...] = (
    _rule_schedule,
    _rule_tolerance,
    _rule_retry,
    _rule_max_silence,
    _rule_compliance,
    _rule_resource,
    _rule_dst,
)


# --- maintenance windows ----------------------------------------------------------------------


@dataclass(frozen=True)
class WallTime(_Type):
    """A date and time, read in the window's zone unless it carries its own offset."""

    doc: str = "date and time (YYYY-MM-DD HH:MM, optionally with an offset)"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if isinstance(value, datetime):
            return value
        if isinstance(value, date):
            return datetime(value.year, value.month, value.day)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.strip())
            except ValueError:
                pass
        return ctx.error(
            path, f"{value!r} is not a date and time", "write it as YYYY-MM-DD HH:MM (read in the window's timezone)"
        )

    def schema(self) -> dict[str, Any]:
        return {"type": "string"}


@dataclass(frozen=True)
class DurationText(_Type):
    """A duration such as 90s, 15m, 2h, 1d."""

    doc: str = "duration (90s, 15m, 2h, 1d)"

    def check(self, value: Any, path: str, ctx: _Ctx) -> Any:
        if not isinstance(value, str):
            return _wrong_type(value, "a duration such as 2h", path, ctx)
        try:
            seconds = parse_duration(value)
        except DurationError as e:
            return ctx.error(path, str(e), "a duration such as 90s, 15m, 2h or 1d")
        if not 0 < seconds <= MAX_BLACKOUT_S:
            return ctx.error(
                path, f"{value} is not between 1s and {MAX_BLACKOUT_S // DAY_S}d", "a window lasts at most 31 days"
            )
        return seconds

    def schema(self) -> dict[str, Any]:
        return {"type": "string"}


MAX_BLACKOUT_S = 31 * DAY_S
BLACKOUT_FIELDS = (
    Field(
        "name",
        Str(max_len=63, pattern=TAG_PATTERN, pattern_hint="letters, digits and . _ : / -"),
        nullable=True,
        default_doc="FILE:LINE",
        rule="how skipped runs, status and forecast name the window",
    ),
    Field("reason", Str(max_len=256), required=True, rule="why: recorded with every occurrence the window skips"),
    Field("timezone", Str(max_len=64, zone=True), "UTC", default_doc="UTC", rule="IANA zone the times are read in"),
    Field("from", WallTime(), nullable=True, rule="start of a one-off window (wall time in timezone)"),
    Field("to", WallTime(), nullable=True, rule="end of a one-off window, exclusive"),
    Field("cron", Str(max_len=256), nullable=True, rule="a recurring window opens at each fire of this expression"),
    Field("duration", DurationText(), nullable=True, rule="how long a recurring window stays open (elapsed time)"),
    Field("jobs", StrList(Str(max_len=63, pattern=ID_PATTERN)), (), default_doc="[]", rule="job ids it applies to"),
    Field("tags", StrList(Str(max_len=63, pattern=TAG_PATTERN)), (), default_doc="[]", rule="tags it applies to"),
    Field(
        "resources",
        StrList(Str(max_len=63, pattern=RESOURCE_PATTERN)),
        (),
        default_doc="[]",
        rule="resources it applies to",
    ),
)
BLACKOUT = Obj(BLACKOUT_FIELDS)


def _blackouts(value: Any, ctx: _Ctx) -> tuple[Window, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        _wrong_type(value, "a list of windows ({from, to, reason} or {cron, duration, reason})", "blackouts", ctx)
        return ()
    if len(value) > MAX_BLACKOUTS:
        ctx.error("blackouts", f"lists {len(value)} windows; the limit is {MAX_BLACKOUTS}")
        return ()
    out: list[Window] = []
    names: dict[str, int] = {}
    for i, item in enumerate(value):
        at = path_index("blackouts", i)
        before = ctx.error_count()
        d = BLACKOUT.check(item, at, ctx)
        if d is INVALID or ctx.error_count() > before:
            continue
        window = _window(d, at, ctx)
        if not isinstance(window, Window):
            continue
        if window.name in names:
            ctx.error(
                path_key(at, "name"),
                f"window {window.name!r} is already named at line {names[window.name]}",
                "give each window its own name",
            )
            continue
        names[window.name] = ctx.line(at)
        out.append(window)
    return tuple(out)


def _window(d: dict[str, Any], at: str, ctx: _Ctx) -> Any:  # a Window, or INVALID
    absolute = d["from"] is not None or d["to"] is not None
    recurring = d["cron"] is not None or d["duration"] is not None
    line = ctx.line(at)
    common = dict(
        name=d["name"] or f"{ctx.doc.file}:{line}",
        reason=d["reason"],
        timezone=d["timezone"],
        jobs=d["jobs"],
        tags=d["tags"],
        resources=d["resources"],
        source_file=ctx.doc.file,
        source_line=line,
    )
    if not (d["jobs"] or d["tags"] or d["resources"]):
        return ctx.error(at, "the window applies to nothing", "add jobs:, tags: or resources: (a list)")
    if absolute == recurring:
        return ctx.error(
            at,
            "a window is either from/to or cron/duration" + (", not both" if absolute else ""),
            "e.g. {from: '2026-12-05 22:00', to: '2026-12-06 02:00'} or {cron: '0 2 * * sun', duration: 2h}",
        )
    if absolute:
        for key in ("from", "to"):
            if d[key] is None:
                return ctx.error(at, f"{key} is missing", "a one-off window needs both from: and to:")
        start, end = wall_to_utc(d["from"], d["timezone"]), wall_to_utc(d["to"], d["timezone"])
        if end <= start:
            return ctx.error(path_key(at, "to"), "to is not after from", "the window ends after it starts")
        if (end - start).total_seconds() > MAX_BLACKOUT_S:
            return ctx.error(path_key(at, "to"), "the window is longer than 31 days", "pause the jobs instead")
        return Window(start=start, end=end, **common)
    if d["cron"] is None or d["duration"] is None:
        return ctx.error(
            at, f"{'duration' if d['cron'] else 'cron'} is missing", "a recurring window needs both cron: and duration:"
        )
    try:
        sched = compile_schedule(d["cron"], d["timezone"])
    except ScheduleError as e:
        return ctx.error(path_key(at, "cron"), str(e), "a cron expression such as '0 2 * * sun'")
    if sched.kind != "cron":
        return ctx.error(
            path_key(at, "cron"),
            f"{d['cron']!r} does not open a window at set times",
            "use a cron expression such as '0 2 * * sun'",
        )
    gap = sched.max_gap_s()
    if gap is not None and d["duration"] >= (sched.min_gap_s() or gap):
        ctx.warn(
            path_key(at, "duration"),
            "the window is open for as long as the gap between its openings or longer",
            "the jobs it applies to never run; pause them instead",
        )
    return Window(cron=d["cron"], duration_s=d["duration"], **common)
