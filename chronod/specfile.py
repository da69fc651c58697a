"""Job files and registry directories -> validated specs, read the way /etc/cron.d should be.

YAML is parsed safely (docs/reference.md, What a root daemon accepts): a size cap before parsing; then libyaml's events are
screened so that no tag, anchor or alias ever reaches a constructor (nothing executes, and
an alias bomb is refused at its first anchor); in the same single pass the events are
turned into plain values by hand (no node tree is composed), keeping the line of every
field and the raw text of every unquoted scalar that YAML did not read as a string. `chronod.core.validate` does the rest.

A root daemon (`secure`) opens each file with O_NOFOLLOW and checks the open descriptor:
a regular file, owned by root (or by the user every job in it runs as), not group- or
world-writable, exactly one hard link. Symbolic links are refused, even ones that point
inside the registry: a real file cannot be swapped for a link to somewhere else.
"""

from __future__ import annotations

import dataclasses
import errno
import grp
import hashlib
import marshal
import os
import pwd
import re
import stat
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

import yaml
from yaml.composer import ComposerError
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    NodeEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode

from chronod.core.blackout import Window
from chronod.core.model import JobSpec, Resource, Retry, RunOn, json_text_and_hash, spec_of
from chronod.core.occurrence import First, first_after
from chronod.core.schedule import compile_schedule, is_reboot
from chronod.core.validate import (
    ERROR,
    WARNING,
    Problem,
    SpecDocument,
    path_index,
    path_key,
    validate_document,
)

MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 32
FILE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
SUFFIXES = (".yaml", ".yml")
# Left behind by package managers and editors: never jobs, whatever they end with.
LEFTOVERS = (
    ".dpkg-old",
    ".dpkg-new",
    ".dpkg-dist",
    ".dpkg-tmp",
    ".dpkg-bak",
    ".rpmnew",
    ".rpmsave",
    ".rpmorig",
    ".swp",
    ".swo",
    ".bak",
    ".orig",
    ".tmp",
)

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_RESOLVER = yaml.resolver.Resolver()  # the implicit typing the composer would apply
_resolve: Callable[..., str] = _RESOLVER.resolve
# The first characters of a plain scalar that an implicit resolver may read as something
# else than a string (a number, a boolean, null, a date, a merge key): a scalar that is
# quoted, or plain and starts with another character, is a string without asking the
# resolver, which tries each of its patterns in turn (four scalars a job). Exact while the
# resolver has no pattern for every first character and no path resolver, as PyYAML's.
_RESOLVED_FIRST = frozenset(c for c in _RESOLVER.yaml_implicit_resolvers if c is not None)
_MERGE_FIRST = frozenset(
    c for c, found in _RESOLVER.yaml_implicit_resolvers.items() if any(tag == _MERGE_TAG for tag, _ in found)
)
assert None not in _RESOLVER.yaml_implicit_resolvers and not _RESOLVER.yaml_path_resolvers


@dataclass
class FileResult:
    """One file of the registry: its jobs that validated, its resources, its problems.

    `specs` holds every job of the file that is valid on its own, even when another part
    of the file has errors; `ok` says whether the file as a whole is clean, so that a
    daemon can keep a bad file's last good version instead. A file that could not be read
    or parsed, or failed a security check, has no specs.
    """

    path: str
    specs: tuple[JobSpec, ...] = ()
    resources: dict[str, Resource] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    digest: str = ""
    blackouts: tuple[Window, ...] = ()  # sha256 of the bytes read; "" when the file was not read
    delegated: str = ""  # the owner's name when a secure load found it not owned by root

    @property
    def trusted(self) -> bool:
        """Owned by root (or by the daemon itself), or loaded without the file checks."""
        return not self.delegated

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return not any(p.severity == ERROR for p in self.problems)


@dataclass
class RegistryResult:
    """Everything read from a registry: per file, merged, and every problem in file order.

    `jobs` is the union of the files' `specs` (ids unique: a later file's duplicate is an
    error and left out); `resources` the union of the files' concurrency groups.
    """

    files: dict[str, FileResult] = field(default_factory=dict)
    jobs: dict[str, JobSpec] = field(default_factory=dict)
    resources: dict[str, Resource] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    blackouts: list[Window] = field(default_factory=list)
    workers: int = 0  # the processes that validated its files (0: this one)
    # (kind, name) of the ids, resources and windows that files of two users both define:
    # neither file has them (`_contest`), nor any file merged after
    contested: set[tuple[str, str]] = field(default_factory=set, repr=False)
    # specs holding the JSON text a worker made for the definitions' sync (`JobSpec.hold_json`)
    # or their first occurrence on the loading node (`JobSpec.hold_first`)
    holding: list[JobSpec] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        """No errors anywhere (warnings allowed)."""
        return not any(p.severity == ERROR for p in self.problems)

    def let_go(self) -> None:
        """Drop the JSON texts the definitions' sync did not take (jobs of other nodes, jobs
        stored already, duplicates) and the first occurrences no job took: a spec holds
        them from the load to the sync and the jobs' making only."""
        for spec in self.holding:
            spec.hold_json(None)
            spec.hold_first(None)
        self.holding = []


class _Refused(Exception):
    """The file cannot be used at all: one problem says why."""

    def __init__(self, message: str, hint: str = "", line: int = 0):
        super().__init__(message)
        self.message, self.hint, self.line = message, hint, line


# --- YAML -> SpecDocument ----------------------------------------------------------------


def parse_text(text: str | bytes, file: str) -> SpecDocument:
    """Parse one job file's text into a SpecDocument (values, lines, raw scalars).

    Refusals (syntax, tags, anchors, aliases, nesting, size) become the document's problems
    and leave its data None; duplicate keys are reported and the first value is kept.
    """
    try:
        return _parse(text, file)
    except _Refused as r:
        return SpecDocument(file, None, problems=(Problem(ERROR, file, r.line, None, "", r.message, r.hint),))


def _parse(text: str | bytes, file: str) -> SpecDocument:
    if isinstance(text, bytes):
        if len(text) > MAX_FILE_BYTES:
            raise _too_big(len(text))
        raw = text
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            raise _Refused(f"is not UTF-8 text (byte {e.start}, line {line})", "save the file as UTF-8", line) from None
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise _too_big(len(text.encode("utf-8", "surrogatepass")))
    conv = _Converter(file)
    try:
        data = conv.document(_Screened(text))
    except yaml.MarkedYAMLError as e:
        message, line = _yaml_error(e, text.count("\n") + (not text.endswith("\n")))
        raise _Refused(message, "check indentation and quoting near this line", line) from None
    except yaml.reader.ReaderError as e:  # a character YAML never accepts (NUL, a raw ESC): no mark, a position
        line = text.count("\n", 0, e.position) + 1
        code = e.character if isinstance(e.character, int) else ord(e.character)
        raise _Refused(
            f"YAML syntax: control character U+{code:04X} is not allowed in a YAML file",
            "remove it; in a double-quoted string an escape such as \\x1b is allowed",
            line,
        ) from None
    except yaml.YAMLError as e:
        raise _Refused(f"YAML syntax: {e}") from None
    return SpecDocument(file, data, conv.lines, conv.plain, tuple(conv.problems))


def _yaml_error(e: yaml.MarkedYAMLError, last_line: int) -> tuple[str, int]:
    """PyYAML's error as a message and the line to point at: where what it was reading
    began ("while scanning a quoted scalar", line 3) when that is a scalar, since an
    unclosed quote is only found lines later, at the next quote or the end of the file,
    which may be past the last line; else where it went wrong (never past the last line).
    The message keeps both."""
    problem, context = e.problem or e.context or "not valid YAML", e.context if e.problem else None
    at, began = e.problem_mark, e.context_mark if e.problem else None
    message = f"YAML syntax: {problem}"
    if at is not None and at.line + 1 > last_line:
        message += " at the end of the file"
    elif at is not None:
        message += f" at line {at.line + 1}, column {at.column + 1}"
    if context and began is not None and (at is None or (began.line, began.column) != (at.line, at.column)):
        message += f", {context} that began at line {began.line + 1}, column {began.column + 1}"
    if began is not None and context and "scalar" in context:
        return message, began.line + 1
    mark = at or began
    return message, min(mark.line + 1, max(last_line, 1)) if mark else 0


def _too_big(size: int) -> _Refused:
    return _Refused(
        f"is {size} bytes; job files are limited to {MAX_FILE_BYTES} bytes", "split the jobs across several files"
    )


class _Screened:
    """libyaml's events, each screened before it is used: no tag, anchor or alias ever
    reaches a constructor, and nesting deeper than MAX_DEPTH is refused at its first level
    too many (an alias bomb stops at its first anchor)."""

    def __init__(self, text: str):
        # the parser's own next-event call, not yaml.parse's generator around it (a check
        # and a get for each event)
        self._next = _LOADER(text).get_event
        self.depth = 0

    def next(self) -> Any:
        event: Any = self._next()  # each kind of event has its own fields
        kind = type(event)
        if kind is ScalarEvent:
            if event.tag is None and event.anchor is None:
                return event
        elif kind is MappingStartEvent or kind is SequenceStartEvent:
            self.depth += 1
            if self.depth > MAX_DEPTH and event.tag is None and event.anchor is None:
                raise _Refused(f"is nested more than {MAX_DEPTH} levels deep", "", _line(event))
        elif kind is MappingEndEvent or kind is SequenceEndEvent:
            self.depth -= 1
            return event
        elif kind is AliasEvent:
            raise _Refused(
                f"aliases (*{event.anchor}) are not allowed",
                "write the value out, or use defaults: for shared fields",
                _line(event),
            )
        if isinstance(event, NodeEvent) and event.anchor is not None:
            raise _Refused(
                f"anchors (&{event.anchor}) are not allowed",
                "write the value out, or use defaults: for shared fields",
                _line(event),
            )
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise _Refused(
                f"YAML tags are not allowed ({_short_tag(tag)})",
                "remove the tag; to force a string, quote the value",
                _line(event),
            )
        return event


def _line(event: Any) -> int:
    return event.start_mark.line + 1 if event.start_mark else 0


def _short_tag(tag: str) -> str:
    return "!!" + tag[len("tag:yaml.org,2002:") :] if tag.startswith("tag:yaml.org,2002:") else tag


class _Converter:
    """Screened events -> plain values, recording the line of each path and raw non-string
    scalars. One pass over libyaml's events: no node tree is composed."""

    def __init__(self, file: str):
        self.file = file
        self.lines: dict[str, int] = {}
        self.plain: dict[str, str] = {}
        self.problems: list[Problem] = []

    def document(self, events: _Screened) -> Any:
        """The single document of the stream (None for an empty stream)."""
        events.next()  # stream start
        start = events.next()
        if type(start) is StreamEndEvent:
            return None
        data = self.value(events, events.next(), "")
        events.next()  # document end
        end = events.next()
        if type(end) is not StreamEndEvent:
            raise ComposerError(
                "expected a single document in the stream",
                start.start_mark,
                "but found another document",
                end.start_mark,
            )
        return data

    def value(self, events: _Screened, event: Any, path: str) -> Any:
        self.lines.setdefault(path, event.start_mark.line + 1)
        kind = type(event)
        if kind is ScalarEvent:
            return self.scalar(event, path)
        if kind is SequenceStartEvent:
            items: list[Any] = []
            item = events.next()
            while type(item) is not SequenceEndEvent:
                items.append(self.value(events, item, path_index(path, len(items))))
                item = events.next()
            return items
        return self.mapping(events, path)

    def scalar(self, event: ScalarEvent, path: str) -> Any:
        if not event.implicit[0] or event.value[:1] not in _RESOLVED_FIRST:
            return event.value  # quoted, or plain and no pattern applies: a string
        tag = _resolve(ScalarNode, event.value, event.implicit)
        if tag == _STR_TAG:
            return event.value
        construct = _LOADER.yaml_constructors.get(tag)
        if construct is None:
            return event.value
        marks: tuple[Any, Any] = (event.start_mark, event.end_mark)  # the C parser's marks serve too
        value = construct(_CONSTRUCTOR, ScalarNode(tag, event.value, *marks, event.style))
        self.plain[path] = event.value
        return value

    def mapping(self, events: _Screened, path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        key = events.next()
        while type(key) is not MappingEndEvent:
            line = key.start_mark.line + 1
            if type(key) is not ScalarEvent or _is_merge(key):
                what = "merge keys (<<)" if type(key) is ScalarEvent else "keys that are lists or mappings"
                self._error(
                    line, path, f"{what} are not allowed", "use plain names as keys; shared fields go under defaults:"
                )
                _skip(events, key)
                _skip(events, events.next())
            else:
                name = key.value  # as written: `on:` stays "on", `no:` stays "no"
                at = path_key(path, name)
                if name in out:
                    self._error(
                        line, at, f"duplicate key {name!r}: first given at line {self.lines[at]}", "keep one of the two"
                    )
                    _skip(events, events.next())
                else:
                    self.lines[at] = line
                    out[name] = self.value(events, events.next(), at)
            key = events.next()
        return out

    def _error(self, line: int, path: str, message: str, hint: str) -> None:
        self.problems.append(Problem(ERROR, self.file, line, None, path, message, hint))


def _is_merge(key: ScalarEvent) -> bool:
    """Whether YAML reads the key as a merge key (`<<`)."""
    return (
        bool(key.implicit[0])
        and key.value[:1] in _MERGE_FIRST
        and _resolve(ScalarNode, key.value, key.implicit) == _MERGE_TAG
    )


def _skip(events: _Screened, event: Any) -> None:
    """Consume the rest of the node that starts with `event` (still screened)."""
    depth = 1 if type(event) in (MappingStartEvent, SequenceStartEvent) else 0
    while depth:
        kind = type(events.next())
        if kind is MappingStartEvent or kind is SequenceStartEvent:
            depth += 1
        elif kind is MappingEndEvent or kind is SequenceEndEvent:
            depth -= 1


# --- files and the registry --------------------------------------------------------------


class StoredFiles(Protocol):
    """Where a `FileCache` keeps its results between runs of the daemon (the store's
    `registry_files`, through `chronod.daemon.filestore`)."""

    def load(self) -> dict[str, tuple[str, bytes]]:
        """Every stored file: path -> (key, encoded result)."""
        ...

    def save(self, changes: dict[str, tuple[str, bytes] | None]) -> None:
        """Store these results (None: forget the file)."""
        ...


class FileCache:
    """Each job file's digest and the result it gave, so that a reload reads an unchanged
    file's bytes but neither parses nor validates them again.

    A hit hands back the same validated specs (one copy of each spec, whatever the number
    of reloads). The file checks (type, size, mode, links, symbolic links) are made on every
    read, and the owner rule on every hit, so a cached file never escapes them. Results
    are kept for one day of `now` at most (DST warnings look ahead from `now`), and only
    for the files the last load saw.

    With `stored`, the results outlive the process: a restart finds each unchanged file's
    result there (its key names the bytes' digest, the day, the file checks' mode and the
    validator: chrono's own validating code and the time zone data), decodes it instead of
    validating the file, and the load writes back only what changed.
    """

    def __init__(self, stored: StoredFiles | None = None) -> None:
        self._results: dict[str, tuple[str, FileResult]] = {}
        self._seen: set[str] = set()
        self._stored = stored
        self._on_disk: dict[str, tuple[str, bytes]] | None = None  # read at the first load
        self._changes: dict[str, tuple[str, bytes] | None] = {}
        self.hits = 0
        self.misses = 0
        self.reused = 0  # hits found in the store, not in memory

    def get(self, name: str, key: str) -> FileResult | None:
        self._seen.add(name)
        found = self._results.get(name)
        if found is not None and found[0] == key:
            self.hits += 1
            return _copy(found[1])
        if self._stored is not None:
            if self._on_disk is None:
                self._on_disk = self._stored.load()
            stored = self._on_disk.get(name)
            if stored is not None and stored[0] == key:
                try:
                    fres = decode_result(name, stored[1])
                except (ValueError, KeyError, TypeError, EOFError, zlib.error):  # not ours to trust: validate
                    fres = None
                if fres is not None:
                    self._results[name] = (key, fres)
                    self.hits += 1
                    self.reused += 1
                    return _copy(fres)
        self.misses += 1
        return None

    def put(self, name: str, key: str, result: FileResult, encoded: bytes | None = None) -> None:
        """Keep a file's result; `encoded`: its `encode_result`, when already made."""
        self._results[name] = (key, _copy(result))
        if self._stored is not None:
            self._changes[name] = (key, encoded if encoded is not None else encode_result(result))

    def forget_unseen(self) -> None:
        """Drop the files the last load did not see (removed or renamed), then store what
        this load validated (and forget the stored files it did not see)."""
        for name in self._results.keys() - self._seen:
            del self._results[name]
        if self._stored is not None:
            on_disk = self._on_disk if self._on_disk is not None else self._stored.load()
            for name in on_disk.keys() - self._seen:
                self._changes[name] = None
            if self._changes:
                self._stored.save(self._changes)
            for name, value in self._changes.items():
                if value is None:
                    on_disk.pop(name, None)
                else:
                    on_disk[name] = value
            self._on_disk, self._changes = on_disk, {}
        self._seen = set()


def _copy(fres: FileResult) -> FileResult:
    """A result the registry merge may change without touching the cached one; the specs
    themselves (frozen) are shared."""
    return FileResult(fres.path, fres.specs, dict(fres.resources), list(fres.problems), fres.digest, fres.blackouts)


# --- a validated result, stored ------------------------------------------------------------

_BLANK = JobSpec(id="", owner="", schedule="", command="", idempotency_class="").to_json_dict()
_REQUIRED = ("id", "owner", "schedule", "command", "idempotency_class")
_WINDOW_FIELDS = tuple(f.name for f in dataclasses.fields(Window))
_FIELDS = tuple(f.name for f in dataclasses.fields(JobSpec))
_SOURCE = _FIELDS.index("source_file")
_RETRY, _RUN_ON, _NOTIFY = (_FIELDS.index(n) for n in ("retry", "run_on", "notify"))
# one instance of each default policy, shared by the decoded specs that have it (frozen)
_DEFAULT_RETRY, _DEFAULT_RUN_ON = Retry(), RunOn()


def encode_result(fres: FileResult) -> bytes:
    """A file's validated result, compressed (`decode_result` reverses it), with each spec's
    hash, so that a restart neither validates nor hashes an unchanged file's jobs again.

    A spec with the default retry, placement and no notification (most jobs) is a tuple:
    its hash, then its fields in order (those three and a source file that is the file
    itself as None), handed straight back as its slots (`model.spec_of`); another spec is the fields
    of its JSON form that differ from the defaults. marshal, not JSON: no Python object but
    the result's own values is made (the stored blob is sealed with the node's key,
    `chronod.daemon.filestore`), at a third of the cost of decoding JSON into specs."""
    specs: list[Any] = []
    for spec in fres.specs:
        digest = spec.spec_hash()  # the hash the definitions' sync needs next: computed once
        if spec.retry == _DEFAULT_RETRY and spec.run_on == _DEFAULT_RUN_ON and not spec.notify:
            values = [getattr(spec, n) for n in _FIELDS]
            values[_RETRY] = values[_RUN_ON] = values[_NOTIFY] = None
            if values[_SOURCE] == fres.path:
                values[_SOURCE] = None
            specs.append((digest, *values))
            continue
        d = spec.to_json_dict()
        row = {k: v for k, v in d.items() if k in _REQUIRED or v != _BLANK[k]}
        row["env"] = [list(kv) for kv in spec.env]  # in the file's order (the JSON form sorts)
        if row.get("source_file") == fres.path:
            del row["source_file"]
        row["#"] = digest
        specs.append(row)
    doc = {
        "specs": specs,
        "resources": [[r.name, r.max_concurrency] for r in fres.resources.values()],
        "problems": [[p.severity, p.file, p.line, p.job_id, p.path, p.message, p.hint] for p in fres.problems],
        "blackouts": [
            {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in dataclasses.asdict(w).items()}
            for w in fres.blackouts
        ],
        "digest": fres.digest,
    }
    return zlib.compress(marshal.dumps(doc), 1)


def decode_result(name: str, data: bytes) -> FileResult:
    """The `FileResult` that `encode_result` stored for the file `name`."""
    doc = marshal.loads(zlib.decompress(data))
    specs = []
    for row in doc["specs"]:
        if type(row) is tuple:  # plain: the fields in order
            values = list(row)
            digest = values.pop(0)
            values[_RETRY], values[_RUN_ON], values[_NOTIFY] = _DEFAULT_RETRY, _DEFAULT_RUN_ON, ()
            if values[_SOURCE] is None:
                values[_SOURCE] = name
            spec = spec_of(values)  # JobSpec(*values) at half the cost
            spec.remember_hash(digest)
            specs.append(spec)
            continue
        digest = row.pop("#")
        env = tuple((str(k), str(v)) for k, v in row.pop("env"))
        d = dict(_BLANK)
        d["source_file"] = name
        d.update(row)
        spec = JobSpec.from_json_dict(d)  # the model's own reading of its JSON form
        if env:
            spec = dataclasses.replace(spec, env=env)
        spec.remember_hash(digest)
        specs.append(spec)
    blackouts = []
    for w in doc["blackouts"]:
        for k in ("start", "end"):
            if w.get(k) is not None:
                w[k] = datetime.fromisoformat(w[k])
        for k in ("jobs", "tags", "resources"):
            w[k] = tuple(w.get(k) or ())
        blackouts.append(Window(**{k: v for k, v in w.items() if k in _WINDOW_FIELDS}))
    return FileResult(
        name,
        tuple(specs),
        {n: Resource(n, int(m)) for n, m in doc["resources"]},
        [Problem(*p) for p in doc["problems"]],
        doc["digest"],
        tuple(blackouts),
    )


def file_key(digest: str, now: datetime, secure: bool) -> str:
    """What a file's validated result depends on besides its name: its bytes, the day
    (DST warnings look ahead from `now`), whether the file checks apply, and the validator."""
    return f"{digest}|{now.date().isoformat()}|{int(secure)}|{validator_version()}"


_VALIDATOR: list[str] = []


def validator_version() -> str:
    """A digest of the code that validates job files (chrono's `core` package and this
    module) and of the time zone data: a result stored by another chrono, or before a
    tzdata update, is never reused."""
    if not _VALIDATOR:
        h = hashlib.sha256()
        here = Path(__file__).resolve()
        for p in [here, *sorted((here.parent / "core").glob("*.py"))]:
            h.update(p.name.encode() + b"\0" + p.read_bytes())
        h.update(_tzdata_version().encode())
        _VALIDATOR.append(h.hexdigest()[:16])
    return _VALIDATOR[0]


def _tzdata_version() -> str:
    import zoneinfo

    for base in zoneinfo.TZPATH:
        try:
            with open(os.path.join(base, "tzdata.zi"), "rb") as f:
                return f.readline().decode(errors="replace").strip()
        except OSError:
            continue
    try:
        from importlib.metadata import version

        return "tzdata " + version("tzdata")
    except Exception:  # no time zone data package either: the zones come from elsewhere
        return ""


def load_file(
    path: Path | str, *, now: datetime, secure: bool | None = None, cache: FileCache | None = None
) -> FileResult:
    """Read, check and validate one job file (see `load_registry` for `secure` and `cache`)."""
    secure = _default_secure(secure)
    got = _read_file(path, now, secure, cache)
    if isinstance(got, FileResult):
        return got
    fres = _validate(got.data, got.name, got.digest, now)
    if cache is not None:
        cache.put(got.name, got.key, fres)
    return _owned(fres, got.owner, secure)


@dataclass
class _Unvalidated:
    """A file read and checked whose result is neither cached nor stored: to validate."""

    name: str
    data: bytes
    digest: str
    key: str
    owner: int


def _read_file(path: Path | str, now: datetime, secure: bool, cache: FileCache | None) -> FileResult | _Unvalidated:
    """The file checks and the cache: a result (refused, or cached and held to the owner
    rule), or the file's bytes to validate."""
    name = str(path)
    try:
        data, owner = _read(Path(path), secure)
    except _Refused as r:
        return FileResult(name, problems=[Problem(ERROR, name, r.line, None, "", r.message, r.hint)])
    digest = hashlib.sha256(data).hexdigest()
    key = file_key(digest, now, secure)
    fres = cache.get(name, key) if cache is not None else None
    if fres is None:
        return _Unvalidated(name, data, digest, key, owner)
    return _owned(fres, owner, secure)


def _owned(fres: FileResult, owner: int, secure: bool) -> FileResult:
    """The owner rule, applied to every result however it was obtained (see `_check_owner_runs_as`)."""
    if secure and owner not in _trusted_owners():
        fres.delegated = _user_name(owner)
        _check_owner_runs_as(fres, owner)
    return fres


def load_as_owned_by(data: bytes, name: str, owner: int, *, now: datetime) -> FileResult:
    """How a root daemon would read `data` in a file owned by `owner` (a tool about to
    write a registry file asks this first): validated, and, when `owner` is not root,
    held to the delegation rules (`_check_owner_runs_as`)."""
    fres = _validate(data, name, hashlib.sha256(data).hexdigest(), now)
    if owner not in _trusted_owners():
        fres.delegated = _user_name(owner)
        _check_owner_runs_as(fres, owner)
    return fres


def refusals(path: Path | str, *, now: datetime) -> list[Problem]:
    """The errors a daemon of this user (a root one applies the file checks) finds in the
    file at `path`, for `show` and `edit` to warn of what would not run."""
    return [p for p in load_file(path, now=now, secure=None).problems if p.severity == ERROR]


def _validate(data: bytes, name: str, digest: str, now: datetime) -> FileResult:
    doc = parse_text(data, name)
    if doc.data is None and doc.problems:  # refused before there was anything to validate
        return FileResult(name, problems=list(doc.problems), digest=digest)
    result = validate_document(doc, now=now)
    return FileResult(name, result.jobs, dict(result.resources), list(result.problems), digest, result.blackouts)


def load_registry(
    paths: Iterable[Path | str] | Path | str,
    *,
    now: datetime,
    secure: bool | None = None,
    cache: FileCache | None = None,
    workers: int = 1,
    node: str | None = None,
) -> RegistryResult:
    """Load a registry: job files and directories of `*.yaml`/`*.yml` files.

    `secure` (default: when running as root) applies the root daemon's file checks. A `cache` kept
    from one load to the next (the daemon's reloads) skips files whose bytes did not
    change (see `FileCache`). In a directory,
    dotfiles, `~` backups and package/editor leftovers are skipped silently, other YAML
    names outside `[A-Za-z0-9_.-]` with a warning. Files load in sorted order, and when
    two files define the same id the later one's job is an error and left out; but files
    owned by root come first whatever their names, so that a delegated file (owned by a
    user, see `_check_owner_runs_as`) never takes an id or a resource a root file defines.

    With `workers` > 1, the files to validate (neither cached nor stored) are validated in
    up to that many forked processes when they are many enough to repay the forks
    (`PARALLEL_MIN_BYTES`): each sends back the stored form of its files' results
    (`encode_result`), which this process decodes. The file checks and the owner rule are
    made here, before and after, exactly as for a file validated here; the results are the
    same either way. A worker that fails raises `chronod.workers.WorkerFailed` and nothing
    is loaded.

    With a `node`, each spec validated by this load (not one cached or stored) holds its
    key, jitter offset and first occurrence on that node after `now`
    (`chronod.core.occurrence.first_after`, `JobSpec.hold_first`), computed beside its
    validation: in the workers, where there are workers.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    secure = _default_secure(secure)
    reg = RegistryResult()
    read: dict[str, FileResult | _Unvalidated] = {}
    for given in paths:
        for file, skipped in _expand(Path(given), secure, reg):
            if skipped is not None:
                reg.problems.append(skipped)
            elif str(file) not in read:
                read[str(file)] = _read_file(file, now, secure, cache)
    todo = [got for got in read.values() if isinstance(got, _Unvalidated)]
    reg.workers = _workers_for(todo, workers)
    done = _validate_all(todo, now, reg.workers, reg.holding, node)
    for name, got in read.items():
        if isinstance(got, _Unvalidated):
            fres, blob = done[name]
            if cache is not None:
                cache.put(name, got.key, fres, blob)
            got = _owned(fres, got.owner, secure)
        reg.files[name] = got
    if cache is not None:
        cache.forget_unseen()
    for fres in merge_order(reg.files):
        _merge(reg, fres)
    return reg


# Below this many bytes of job files to validate, they are validated in this process: two
# forks cost about what validating this much costs here (bench/README.md, "A cold start in
# parallel"), so a small registry or an edit of a few files never pays for workers.
PARALLEL_MIN_BYTES = 256 * 1024


def _workers_for(todo: list[_Unvalidated], workers: int) -> int:
    """How many worker processes validate `todo` (0: this process does)."""
    if workers < 2 or len(todo) < 2 or sum(len(got.data) for got in todo) < PARALLEL_MIN_BYTES:
        return 0
    return min(workers, len(todo))


def _validate_all(
    todo: list[_Unvalidated], now: datetime, workers: int, holding: list[JobSpec], node: str | None
) -> dict[str, tuple[FileResult, bytes | None]]:
    """Each file's result, and its stored form when a worker made it (its specs then hold
    their JSON text, and are added to `holding`); with a `node`, its specs hold their first
    occurrence there (`_first`)."""
    done: dict[str, tuple[FileResult, bytes | None]] = {}
    if not workers:
        done = {got.name: (_validate(got.data, got.name, got.digest, now), None) for got in todo}
        if node is not None:
            for fres, _ in done.values():
                for spec in fres.specs:
                    spec.hold_first(_first(spec, node, now))
                holding.extend(fres.specs)
        return done
    from chronod.workers import run_forked

    def work(got: _Unvalidated) -> bytes:  # in a worker
        fres = _validate(got.data, got.name, got.digest, now)
        # the stored JSON of each spec, which the definitions' sync would compute next
        texts = [json_text_and_hash(spec)[0] for spec in fres.specs]
        firsts = [_first_plain(_first(spec, node, now)) for spec in fres.specs] if node is not None else None
        return marshal.dumps((encode_result(fres), texts, firsts))

    for i, payload in run_forked(work, todo, [len(got.data) for got in todo], workers, lambda got: got.name):
        blob, texts, firsts = marshal.loads(payload)
        fres = decode_result(todo[i].name, blob)
        for spec, text in zip(fres.specs, texts):
            spec.hold_json(text)
        if node is not None:
            for spec, row in zip(fres.specs, firsts):
                if row is not None:
                    key, offset, us, rid = row
                    at = None if us is None else _EPOCH + timedelta(microseconds=us)
                    spec.hold_first(First(node, now, key, offset, at, rid))
        holding.extend(fres.specs)
        done[todo[i].name] = (fres, blob)
    return done


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _first(spec: JobSpec, node: str, now: datetime) -> First | None:
    """The spec's first occurrence on `node` after `now`, for the daemon to take instead of
    computing it (None: a disabled or @reboot job has none, and one whose schedule raises
    is left to the daemon, which sets such a job aside)."""
    if not spec.enabled or is_reboot(spec.schedule):
        return None
    try:
        schedule = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)  # cached: validated
        return first_after(spec, schedule, node, now)
    except Exception:
        return None


def _first_plain(first: First | None) -> tuple[str, int, int | None, str | None] | None:
    """A `First` as marshal carries it (its node and `after` are the load's own)."""
    if first is None:
        return None
    at = first.scheduled_at
    return first.key, first.offset_s, None if at is None else (at - _EPOCH) // timedelta(microseconds=1), first.run_id


def merge_order(files: dict[str, FileResult]) -> list[FileResult]:
    """Root-owned files first, then delegated ones, each group oldest file first (then by
    name): whatever a delegated file is called, a root file's definitions come first and
    win; and of two files defining one id, the one that was there first keeps it, so that
    after `cp a.yaml a-copy.yaml` the copy is the duplicate, not the original."""
    return sorted(files.values(), key=lambda f: (not f.trusted, _mtime_ns(f.path), f.path))


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _default_secure(secure: bool | None) -> bool:
    return os.geteuid() == 0 if secure is None else secure


def _trusted_owners() -> set[int]:
    return {0, os.geteuid()}


def _expand(given: Path, secure: bool, reg: RegistryResult) -> Iterable[tuple[Path, Problem | None]]:
    if not given.is_dir():
        if not given.exists() and not given.is_symlink():
            reg.problems.append(Problem(ERROR, str(given), 0, None, "", "no such file or directory"))
            return []
        load, why = skip_decision(given.name)
        if not load:  # named, it is read; in a registry directory chronod passes it by
            what = why.removeprefix("skipped: ") or "chronod reads *.yaml and *.yml files, not hidden or backup ones"
            reg.problems.append(
                Problem(
                    WARNING,
                    str(given),
                    0,
                    None,
                    "",
                    f"in a registry directory chronod does not load this file: {what}",
                    "rename it (for example billing-export.yaml) before it goes into the registry",
                )
            )
        return [(given, None)]
    if secure:
        reg.problems.extend(_check_dir(given))
    out = []
    for entry in sorted(os.listdir(given)):
        load, warning = skip_decision(entry)
        if load or warning:
            file = given / entry
            out.append((file, Problem(WARNING, str(file), 0, None, "", warning) if warning else None))
    return out


def skip_decision(name: str) -> tuple[bool, str]:
    """Whether a directory entry is a job file to load, and the warning if it is skipped loudly."""
    if name.startswith(".") or name.endswith("~") or ".ucf-" in name or name.endswith(LEFTOVERS):
        return False, ""
    if not name.endswith(SUFFIXES):
        return False, ""
    if not FILE_NAME.fullmatch(name):
        return False, "skipped: job file names may use only letters, digits, '_', '.' and '-'"
    return True, ""


def _check_dir(directory: Path) -> list[Problem]:
    st = os.stat(directory)
    problems = []
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problems.append(
            Problem(
                WARNING,
                str(directory),
                0,
                None,
                "",
                "the registry directory is writable by group or others",
                f"chmod go-w {directory}",
            )
        )
    if st.st_uid not in _trusted_owners():
        problems.append(
            Problem(
                WARNING,
                str(directory),
                0,
                None,
                "",
                f"the registry directory is owned by uid {st.st_uid}, not root",
                f"chown root {directory}",
            )
        )
    return problems


def _read(path: Path, secure: bool) -> tuple[bytes, int]:
    """The file's bytes and owner uid, read from one descriptor; _Refused if it fails a check."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_NOFOLLOW if secure else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and secure:
            raise _Refused(
                "is a symbolic link; registry files must be regular files",
                "copy the file into the registry instead of linking it",
            ) from None
        raise _Refused(f"cannot be opened: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        _check_stat(st, secure)
        data = _read_capped(fd)
    finally:
        os.close(fd)
    return data, st.st_uid


def _check_stat(st: os.stat_result, secure: bool) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise _Refused("is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise _too_big(st.st_size)
    if not secure:
        return
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _Refused(f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})", "chmod go-w the file")
    if st.st_nlink != 1:
        raise _Refused(
            f"has {st.st_nlink} hard links; registry files must have exactly one", "copy the file instead of linking it"
        )


def _read_capped(fd: int) -> bytes:
    chunks, size = [], 0
    while size <= MAX_FILE_BYTES:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > MAX_FILE_BYTES:
        raise _too_big(size)
    return b"".join(chunks)


def _check_owner_runs_as(fres: FileResult, owner: int) -> None:
    """A file not owned by root may only hold jobs that run as the file's owner, with the
    owner's own groups: `user:` must name the owner, and `group:`, if given, the owner's
    primary group (the supplementary groups are always the owner's memberships)."""
    owner_name = _user_name(owner)
    strangers = [s for s in fres.specs if s.user is None or _uid(s.user) != owner]
    if strangers:
        first = strangers[0]
        fres.problems.insert(
            0,
            Problem(
                ERROR,
                fres.path,
                first.source_line,
                first.id,
                "user",
                f"the file is owned by {owner_name}, not root, but the job runs as {first.user or 'the daemon user'}",
                f"a file owned by {owner_name} may only hold jobs with user: {owner_name}; or chown root the file",
            ),
        )
        fres.specs = ()
        return
    primary = _primary_group(owner)
    grouped = [s for s in fres.specs if s.group is not None and s.group != primary]
    if grouped:
        first = grouped[0]
        fres.problems.insert(
            0,
            Problem(
                ERROR,
                fres.path,
                first.source_line,
                first.id,
                "group",
                f"the file is owned by {owner_name}, not root, but the job asks for group {first.group}: "
                f"a delegated job runs with its owner's own groups",
                f"remove group: (the job runs with {owner_name}'s primary group {primary or '?'} and memberships); "
                "or chown root the file",
            ),
        )
        fres.specs = ()


def _primary_group(uid: int) -> str | None:
    try:
        return grp.getgrgid(pwd.getpwuid(uid).pw_gid).gr_name
    except KeyError:
        return None


def _takes_over(reg: RegistryResult, fres: FileResult) -> bool:
    """Whether the delegated `fres` defines an id or a resource of a root-owned file; if
    so it is refused (no jobs, no resources) with one error naming both files."""
    roots = {spec.id: spec for spec in reg.jobs.values() if _trusted_file(reg, spec.source_file)}
    for spec in fres.specs:
        first = roots.get(spec.id)
        if first is not None:
            _refuse(
                fres,
                spec.source_line,
                spec.id,
                "id",
                f"id {spec.id!r} is defined by the root-owned {first.source_file}:{first.source_line}",
            )
            return True
    for window in fres.blackouts:
        win = next((w for w in reg.blackouts if w.name == window.name), None)
        if win is not None and _trusted_file(reg, win.source_file):
            _refuse(
                fres,
                window.source_line,
                None,
                "blackouts",
                f"window {window.name!r} is defined by the root-owned {win.source_file}:{win.source_line}",
            )
            return True
    for name in fres.resources:
        owner = next((f for f in reg.files.values() if f.trusted and name in f.resources), None)
        if owner is not None:
            _refuse(
                fres,
                0,
                None,
                path_key("resources", name),
                f"resource {name!r} is defined by the root-owned {owner.path}",
            )
            return True
    return False


def _trusted_file(reg: RegistryResult, path: str) -> bool:
    f = reg.files.get(path)
    return f is None or f.trusted


def _refuse(fres: FileResult, line: int, job_id: str | None, path: str, what: str) -> None:
    fres.problems.insert(
        0,
        Problem(
            ERROR,
            fres.path,
            line,
            job_id,
            path,
            f"{what}; this file is owned by {fres.delegated}, not root, and may not redefine it: the file is refused",
            "the root-owned definition stays; use another name in this file, or ask root to change theirs",
        ),
    )
    fres.specs = ()
    fres.resources = {}
    fres.blackouts = ()


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _uid(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def _merge(reg: RegistryResult, fres: FileResult) -> None:
    """Add one file's jobs and resources to the registry; a later duplicate is an error.
    A delegated file that defines an id or a resource a root file already defines is
    refused whole (files merge root-owned first: see `merge_order`); what files of two
    users both define, neither has (`_contest_users`)."""
    if fres.delegated and _takes_over(reg, fres):
        reg.problems.extend(fres.problems)
        return
    _contest_users(reg, fres)
    kept = []
    for spec in fres.specs:
        first = reg.jobs.get(spec.id)
        if first is None:
            reg.jobs[spec.id] = spec
            kept.append(spec)
            continue
        fres.problems.append(
            Problem(
                ERROR,
                fres.path,
                spec.source_line,
                spec.id,
                "id",
                f"id {spec.id!r} is already defined at {first.source_file}:{first.source_line}",
                "ids are unique across the registry; rename one of the two",
            )
        )
    fres.specs = tuple(kept)
    _merge_windows(reg, fres)
    for name, res in fres.resources.items():
        first_res = reg.resources.setdefault(name, res)
        if first_res.max_concurrency != res.max_concurrency:
            fres.problems.append(
                Problem(
                    ERROR,
                    fres.path,
                    0,
                    None,
                    path_key("resources", name),
                    f"resource {name!r} has max_concurrency {res.max_concurrency} here but {first_res.max_concurrency} in another file",
                    "a resource name is one group across the registry: give it one limit",
                )
            )
    reg.problems.extend(fres.problems)


def _contest_users(reg: RegistryResult, fres: FileResult) -> None:
    """Take out of `fres`, and out of the file of another user merged before it, the job
    ids, resources and windows that both define, with an error in each file.

    Between files of one owner (or root's) the first file keeps a name. Between two users'
    files there is no first: a file's owner sets its mtime (`touch -d`), which orders the
    files, so keeping the first one's would let a user run their command under another
    user's job id (its history saying it ran, its alerts gone), hold the slots of their
    resource, or cancel their maintenance window. Neither file has it; each file has an
    error, so a daemon keeps running each file's last good version, and says why."""
    if not fres.delegated:
        return
    taken: list[tuple[str, str, FileResult, int]] = []  # (kind, name, other file, line there)
    for spec in fres.specs:
        first = reg.jobs.get(spec.id)
        other = reg.files.get(first.source_file) if first is not None else None
        if ("id", spec.id) in reg.contested or _another_user(fres, other):
            taken.append(("id", spec.id, other or fres, first.source_line if first else 0))
    for name in fres.resources:
        other = next((f for f in reg.files.values() if f is not fres and name in f.resources and _merged(reg, f)), None)
        if ("resource", name) in reg.contested or _another_user(fres, other):
            taken.append(("resource", name, other or fres, 0))
    for window in fres.blackouts:
        win = next((w for w in reg.blackouts if w.name == window.name), None)
        other = reg.files.get(win.source_file) if win is not None else None
        if ("window", window.name) in reg.contested or _another_user(fres, other):
            taken.append(("window", window.name, other or fres, win.source_line if win else 0))
    for kind, name, other, line in taken:
        reg.contested.add((kind, name))
        if other is not fres:
            _drop(reg, other, kind, name)
            _contest_error(reg, other, line, kind, name, fres, merged=True)
        _contest_error(reg, fres, _line_of(fres, kind, name), kind, name, other, merged=False)
        _drop(reg, fres, kind, name)


def _another_user(fres: FileResult, other: FileResult | None) -> bool:
    return other is not None and bool(other.delegated) and other.delegated != fres.delegated


def _merged(reg: RegistryResult, f: FileResult) -> bool:
    """Whether `f`'s resources are in the registry already (it merged before)."""
    return any(reg.resources.get(name) is res for name, res in f.resources.items())


def _line_of(fres: FileResult, kind: str, name: str) -> int:
    if kind == "id":
        return next((s.source_line for s in fres.specs if s.id == name), 0)
    if kind == "window":
        return next((w.source_line for w in fres.blackouts if w.name == name), 0)
    return 0


def _drop(reg: RegistryResult, f: FileResult, kind: str, name: str) -> None:
    """Take the id, resource (and the jobs in its group) or window `name` out of `f` and
    out of the registry when `f` put it there."""
    if kind == "window":
        reg.blackouts[:] = [w for w in reg.blackouts if not (w.name == name and w.source_file == f.path)]
        f.blackouts = tuple(w for w in f.blackouts if w.name != name)
        return
    if kind == "resource":
        if reg.resources.get(name) is f.resources.get(name):
            del reg.resources[name]
        f.resources = {n: r for n, r in f.resources.items() if n != name}
    gone = {s.id for s in f.specs if (s.id == name if kind == "id" else s.resource == name)}
    for job_id in gone:
        if reg.jobs.get(job_id) is not None and reg.jobs[job_id].source_file == f.path:
            del reg.jobs[job_id]
    f.specs = tuple(s for s in f.specs if s.id not in gone)


def _contest_error(
    reg: RegistryResult, f: FileResult, line: int, kind: str, name: str, other: FileResult, merged: bool
) -> None:
    what = {"id": "job id", "resource": "resource", "window": "window"}[kind]
    by = f"{other.delegated}'s {other.path}" if other is not f else "files of other users"
    p = Problem(
        ERROR,
        f.path,
        line,
        name if kind == "id" else None,
        "id" if kind == "id" else path_key("resources" if kind == "resource" else "blackouts", name),
        f"{what} {name!r} is also defined by {by}: files of two users may not share a name, so neither "
        f"file has it" + (" (nor the jobs in its group)" if kind == "resource" else ""),
        "rename it in one of the files; a name shared on purpose belongs in a file owned by root",
    )
    f.problems.insert(0, p)
    if merged:
        reg.problems.append(p)  # the file's own problems are in the registry's already


def _warn_of_others_jobs(fres: FileResult, window: Window) -> None:
    """A delegated file's window that names jobs of other files holds none of them: say so."""
    own = {s.id for s in fres.specs}
    others = [j for j in window.jobs if j not in own]
    if others:
        fres.problems.append(
            Problem(
                WARNING,
                fres.path,
                window.source_line,
                None,
                "blackouts",
                f"window {window.name!r} names {', '.join(repr(j) for j in others)}, not a job of this file: "
                f"a window in a file owned by {fres.delegated} holds only that file's jobs",
                "name only this file's jobs, or ask root to define the window in a root-owned file",
            )
        )


def _merge_windows(reg: RegistryResult, fres: FileResult) -> None:
    """Add a file's maintenance windows; a name is one window across the registry. A
    delegated file's windows hold only that file's own jobs."""
    seen = {w.name: w for w in reg.blackouts}
    kept = []
    for window in fres.blackouts:
        first = seen.get(window.name)
        if first is not None:
            fres.problems.append(
                Problem(
                    ERROR,
                    fres.path,
                    window.source_line,
                    None,
                    "blackouts",
                    f"window {window.name!r} is already defined at {first.source_file}:{first.source_line}",
                    "window names are unique across the registry; rename one of the two",
                )
            )
            continue
        if fres.delegated:
            window = dataclasses.replace(window, only_file=fres.path)
            _warn_of_others_jobs(fres, window)
        seen[window.name] = window
        reg.blackouts.append(window)
        kept.append(window)
    fres.blackouts = tuple(kept)
