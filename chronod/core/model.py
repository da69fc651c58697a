"""The job spec as the rest of chrono sees it: frozen, validated, defaults applied.

Only `chronod.core.validate` builds these (from YAML-derived dicts); everything else
reads them. Field meanings are docs/reference.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Sequence


@dataclass(frozen=True, slots=True)
class Retry:
    """Retry policy: total attempts (1 = no retry) and exponential backoff bounds."""

    attempts: int = 1
    backoff_s: int = 10
    max_backoff_s: int = 3600


@dataclass(frozen=True, slots=True)
class Notify:
    """One notification route: which events, and a command or a webhook URL."""

    on: tuple[str, ...]
    command: str | tuple[str, ...] | None = None
    webhook: str | None = None
    timeout_s: int = 10


@dataclass(frozen=True, slots=True)
class RunOn:
    """Placement: `any` (once per fleet), `each` (every node), or `any` within node globs."""

    mode: str = "any"  # "any" | "each"
    nodes: tuple[str, ...] = ()  # globs; only with mode "any"

    @property
    def each(self) -> bool:
        return self.mode == "each"


@dataclass(frozen=True, slots=True)
class Resource:
    """A concurrency group declared under `resources:`."""

    name: str
    max_concurrency: int


class _HashMemo:
    """The slot where a spec keeps its `spec_hash()` once computed (not a field), the one
    where it holds its stored JSON text until the definitions' sync takes it, and the one
    where it holds its first occurrence, computed where its file was validated, until the
    daemon takes it (`hold_first`)."""

    __slots__ = ("_memo_hash", "_memo_json", "_memo_first")


@dataclass(frozen=True, slots=True)
class JobSpec(_HashMemo):
    """One validated job definition. `source_file`/`source_line` say where it came from.

    In slots, not a dict per instance: a daemon holds one per job (100,000 of them)."""

    id: str
    owner: str
    schedule: str
    command: str | tuple[str, ...]
    idempotency_class: str  # idempotent | keyed | unsafe
    timezone: str = "UTC"
    tolerance_s: int = 0  # always resolved (the documented default is computed by validation)
    tolerance_reason: str | None = None
    overlap: str = "forbid"  # forbid | allow | replace
    catchup: str = "latest"  # latest | all | none
    dst_gap: str = "shift"  # shift | skip: a fixed time a spring-forward skips
    dst_repeat: str = "first"  # first | last | both: a fixed time a fall-back repeats
    catchup_window_s: int = 86400
    blackout: str = "skip"  # skip | defer: an occurrence inside a maintenance window
    timeout_s: int | None = None
    kill_grace_s: int = 10
    retry: Retry = field(default_factory=Retry)
    max_silence_s: int | None = None  # resolved by validation (None only for @reboot)
    max_silence_explicit: bool = False
    run_on: RunOn = field(default_factory=RunOn)
    user: str | None = None
    group: str | None = None
    workdir: str = "/"
    env: tuple[tuple[str, str], ...] = ()
    shell: str = "/bin/sh"
    stdin: str | None = None
    resource: str | None = None
    notify: tuple[Notify, ...] = ()
    tags: tuple[str, ...] = ()
    output_limit_kb: int = 64
    history_days: int = 400  # runs older than this are pruned (the latest success is kept)
    description: str = ""
    enabled: bool = True
    source_file: str = ""
    source_line: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        """A plain dict (JSON-ready) of every field; `from_json_dict` reverses it.
        Written out by hand: `dataclasses.asdict` deep-copies and costs seconds at 100,000 jobs."""
        d = {name: getattr(self, name) for name in _FIELD_NAMES}
        d["retry"] = {
            "attempts": self.retry.attempts,
            "backoff_s": self.retry.backoff_s,
            "max_backoff_s": self.retry.max_backoff_s,
        }
        d["run_on"] = {"mode": self.run_on.mode, "nodes": list(self.run_on.nodes)}
        d["notify"] = [
            {
                "on": list(n.on),
                "command": list(n.command) if isinstance(n.command, tuple) else n.command,
                "webhook": n.webhook,
                "timeout_s": n.timeout_s,
            }
            for n in self.notify
        ]
        d["env"] = dict(self.env)
        d["tags"] = list(self.tags)
        if isinstance(self.command, tuple):
            d["command"] = list(self.command)
        return d

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> "JobSpec":
        """Rebuild a spec stored with `to_json_dict` (the store keeps specs as JSON text)."""
        d = dict(d)
        d["retry"] = Retry(**d.get("retry") or {})
        d["run_on"] = RunOn(mode=d["run_on"]["mode"], nodes=tuple(d["run_on"].get("nodes") or ()))
        d["notify"] = tuple(
            Notify(
                on=tuple(n["on"]),
                command=tuple(n["command"]) if isinstance(n.get("command"), list) else n.get("command"),
                webhook=n.get("webhook"),
                timeout_s=n.get("timeout_s", 10),
            )
            for n in d.get("notify") or ()
        )
        d["env"] = tuple(sorted((d.get("env") or {}).items()))
        d["tags"] = tuple(d.get("tags") or ())
        if isinstance(d.get("command"), list):
            d["command"] = tuple(d["command"])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    def spec_hash(self) -> str:
        """A digest of what the job does (not where it was read from): nodes compare these.
        Computed once per spec object."""
        memo: str | None = getattr(self, "_memo_hash", None)
        if memo is None:
            memo = self.json_and_hash()[1]
        return memo

    def json_and_hash(self) -> tuple[dict[str, Any], str]:
        """`to_json_dict()` and `spec_hash()` from one walk of the spec (the hash is kept)."""
        d = self.to_json_dict()
        memo: str | None = getattr(self, "_memo_hash", None)
        if memo is None:
            import hashlib
            import json

            rest = {k: v for k, v in d.items() if k != "source_file" and k != "source_line"}
            memo = hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:16]
            object.__setattr__(self, "_memo_hash", memo)
        return d, memo

    def remember_hash(self, digest: str) -> None:
        """Keep a `spec_hash()` computed elsewhere from the same JSON (chronod.store.sql)."""
        object.__setattr__(self, "_memo_hash", digest)

    def hold_json(self, text: str | None) -> None:
        """Hold `json_text_and_hash()`'s text, computed elsewhere (a worker process that
        validated the spec's file), for the one sync that stores it; None: let it go."""
        object.__setattr__(self, "_memo_json", text)

    def take_json(self) -> str | None:
        """The text `hold_json` holds, let go of (None: none held)."""
        text: str | None = getattr(self, "_memo_json", None)
        if text is not None:
            object.__setattr__(self, "_memo_json", None)
        return text

    def hold_first(self, first: Any) -> None:
        """Hold the job's first occurrence on a node, computed where its file was validated
        (`chronod.core.occurrence.First`), until the daemon takes it; None: let it go."""
        object.__setattr__(self, "_memo_first", first)

    def take_first(self) -> Any:
        """What `hold_first` holds, let go of (None: none held)."""
        first = getattr(self, "_memo_first", None)
        if first is not None:
            object.__setattr__(self, "_memo_first", None)
        return first


def json_text_and_hash(spec: JobSpec) -> tuple[str, str]:
    """`json.dumps(spec.to_json_dict(), sort_keys=True)` (the stored form of a definition)
    and `spec.spec_hash()`, from one walk of the spec; the hash is kept.

    Written out field by field in the sorted order of the keys, each value as json.dumps
    writes it: a cold start makes this text for each of 100,000 specs, and building the
    dict and encoding it cost twice as much. The hash is of the same text without the two
    source keys. A spec with notification routes (few) takes the dict's way.
    tests/contract/test_store_contract.py and tests/unit/test_spec_json.py keep this equal
    to the methods above."""
    import hashlib

    if spec.notify:
        return _json_text_and_hash_by_dict(spec)
    parts = []
    for name, key in _JSON_KEYS:
        v = getattr(spec, name)
        if v is None:
            parts.append(key + "null")
        elif v is True:
            parts.append(key + "true")
        elif v is False:
            parts.append(key + "false")
        elif type(v) is str:
            parts.append(key + _json_str(v))
        elif type(v) is int:
            parts.append(key + int.__repr__(v))
        else:
            parts.append(key + _json_value(name, v))
    text = "{" + ", ".join(parts) + "}"
    rest = "{" + ", ".join(parts[:_SOURCE_AT] + parts[_SOURCE_AT + 2 :]) + "}"
    digest = hashlib.sha256(rest.encode()).hexdigest()[:16]
    spec.remember_hash(digest)  # the node's published hashes need it next: computed once
    return text, digest


def _json_value(name: str, v: Any) -> str:
    """A field's value that is no string, whole number, boolean or null, as `to_json_dict`
    has it, in JSON."""
    import json

    if name == "retry" or name == "run_on":
        text = _POLICY_TEXTS.get(v)
        if text is None:
            plain = (
                {"attempts": v.attempts, "backoff_s": v.backoff_s, "max_backoff_s": v.max_backoff_s}
                if name == "retry"
                else {"mode": v.mode, "nodes": list(v.nodes)}
            )
            text = json.dumps(plain, sort_keys=True)
            if len(_POLICY_TEXTS) >= 1024:
                _POLICY_TEXTS.clear()
            _POLICY_TEXTS[v] = text
        return text
    if name == "env":
        return json.dumps(dict(v), sort_keys=True) if v else "{}"
    if isinstance(v, tuple):  # tags, a command given as a list
        return json.dumps(list(v)) if v else "[]"
    return json.dumps(v, sort_keys=True)


def _json_text_and_hash_by_dict(spec: JobSpec) -> tuple[str, str]:
    """`json_text_and_hash` through `to_json_dict`."""
    import hashlib
    import json

    d = spec.to_json_dict()
    text = json.dumps(d, sort_keys=True)
    del d["source_file"], d["source_line"]
    digest = hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
    spec.remember_hash(digest)
    return text, digest


def _json_keys() -> tuple[tuple[str, str], ...]:
    import json

    return tuple((name, json.dumps(name) + ": ") for name in sorted(JobSpec.__dataclass_fields__))


# the JSON form's keys in the order json.dumps(sort_keys=True) writes them, each with its
# `"key": ` text; the two source keys are adjacent, from index _SOURCE_AT
_JSON_KEYS = _json_keys()
_SOURCE_AT = [name for name, _ in _JSON_KEYS].index("source_file")
assert _JSON_KEYS[_SOURCE_AT + 1][0] == "source_line"
_POLICY_TEXTS: dict[Any, str] = {}  # a Retry's or a RunOn's JSON text (frozen values, few distinct)


def _json_str_of() -> Callable[[str], str]:
    from json.encoder import encode_basestring_ascii

    return encode_basestring_ascii


_json_str = _json_str_of()  # a string as json.dumps writes it (ASCII, escaped)


_FIELD_NAMES = tuple(f for f in JobSpec.__dataclass_fields__)


def _spec_maker() -> Callable[[Sequence[Any]], JobSpec]:
    setters = {f"set{i}": getattr(JobSpec, name).__set__ for i, name in enumerate(_FIELD_NAMES)}
    body = "".join(f"    set{i}(spec, values[{i}])\n" for i in range(len(_FIELD_NAMES)))
    scope: dict[str, Any] = {"new": object.__new__, "JobSpec": JobSpec, **setters}
    exec(f"def spec_of(values):\n    spec = new(JobSpec)\n{body}    return spec\n", scope)
    made: Callable[[Sequence[Any]], JobSpec] = scope["spec_of"]
    return made


spec_of = _spec_maker()
spec_of.__doc__ = """The spec whose fields are `values`, every one, in order: what `JobSpec(*values)`
makes (JobSpec has no `__post_init__`), at half its cost. A frozen dataclass's `__init__`
sets each of its 35 fields through `object.__setattr__` by name; this sets each slot
through its own descriptor, written out once like dataclasses' own code. A warm start
builds its 100,000 specs so from the stored files (`chronod.specfile.decode_result`)."""

IDEMPOTENCY_CLASSES = ("idempotent", "keyed", "unsafe")
OVERLAP_POLICIES = ("forbid", "allow", "replace")
CATCHUP_POLICIES = ("latest", "all", "none")
DST_GAP_POLICIES = ("shift", "skip")  # the first is cron's (the default)
DST_REPEAT_POLICIES = ("first", "last", "both")  # the first is cron's (the default)
NOTIFY_EVENTS = ("failed", "timed_out", "lost", "silence", "recovered", "skipped_overlap", "succeeded", "cancelled")


class RunState(StrEnum):
    """A run's state (docs/reference.md, Run states). A `StrEnum`: each member is its value,
    so the database, the spool and `--json` hold the very same strings."""

    PENDING = "pending"
    RUNNING = "running"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    SKIPPED_OVERLAP = "skipped_overlap"
    SKIPPED_OUTAGE = "skipped_outage"
    SKIPPED_PAUSED = "skipped_paused"
    SKIPPED_BLACKOUT = "skipped_blackout"
    SKIPPED_RESOURCE = "skipped_resource"
    SKIPPED_ACCOUNT = "skipped_account"
    LOST = "lost"


class Trigger(StrEnum):
    """What opened a run: its schedule, a manual trigger (forced past pauses and overlap or
    not), or a backfill."""

    SCHEDULE = "schedule"
    MANUAL = "manual"
    MANUAL_FORCE = "manual-force"
    BACKFILL = "backfill"


TERMINAL_STATES: tuple[str, ...] = tuple(
    str(s)
    for s in (
        RunState.SUCCEEDED,
        RunState.FAILED,
        RunState.TIMED_OUT,
        RunState.CANCELLED,
        RunState.SKIPPED_OVERLAP,
        RunState.SKIPPED_OUTAGE,
        RunState.SKIPPED_PAUSED,
        RunState.SKIPPED_BLACKOUT,
        RunState.SKIPPED_RESOURCE,
        RunState.SKIPPED_ACCOUNT,
        RunState.LOST,
    )
)
# The terminal states the notifier reads. A skip other than an overlap tells a job's owner
# nothing and changes nothing the notifier keeps (`chronod.notify.core.after_run`: only
# which runs it has seen), and past a fleet's ceiling most ended runs are such skips (the
# shed ones): reading them cost the deciding node as much as everything else it decides.
NOTICED_STATES: tuple[str, ...] = tuple(
    s
    for s in TERMINAL_STATES
    if s
    not in (
        RunState.SKIPPED_OUTAGE,
        RunState.SKIPPED_PAUSED,
        RunState.SKIPPED_BLACKOUT,
        RunState.SKIPPED_RESOURCE,
        RunState.SKIPPED_ACCOUNT,
    )
)
ACTIVE_STATES: tuple[str, ...] = (RunState.PENDING.value, RunState.RUNNING.value, RunState.RETRY_WAIT.value)
