"""Plain conversions for chronoctl's simple parameters, so a command starts without pydantic.

typer (0.2x and later) converts every command-line value through a pydantic TypeAdapter,
and importing pydantic costs more than 100 ms, a third of our start-up budget. Our
parameters are all simple (str, int and float with bounds, bool, Path, enums, lists of
those), so `install` gives each of them a converter written here. Anything else, or a
typer without the hooks this relies on, is left to typer as it is: this changes speed,
never behaviour.
"""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import Any, Callable, get_args, get_origin

_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off", ""}


def _to_str(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = _to_str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{value!r} is not a valid boolean")


def _number(kind: type, info: Any) -> Callable[[Any], Any]:
    label = "integer" if kind is int else "number"

    def convert(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str, bytes)):
            raise ValueError(f"{value!r} is not a valid {label}")
        try:
            number = kind(_to_str(value).strip()) if isinstance(value, (str, bytes)) else kind(value)
        except ValueError:
            raise ValueError(f"{_to_str(value)!r} is not a valid {label}") from None
        if kind is float and not math.isfinite(number):
            raise ValueError(f"{_to_str(value)!r} is not a finite number")
        return _bounded(number, info)

    return convert


def _bounded(number: Any, info: Any) -> Any:
    low, high = info.min, info.max
    if getattr(info, "clamp", False):
        number = max(number, low) if low is not None else number
        return min(number, high) if high is not None else number
    if (low is not None and number < low) or (high is not None and number > high):
        if low is not None and high is not None:
            raise ValueError(f"{number} is not in the range {low}<=x<={high}")
        bound = f">={low}" if low is not None else f"<={high}"
        raise ValueError(f"{number} is not in the range x{bound}")
    return number


def _enum(kind: type[Enum], info: Any) -> Callable[[Any], Any]:
    sensitive = getattr(info, "case_sensitive", True)

    def convert(value: Any) -> Enum:
        if isinstance(value, kind):
            return value
        text = _to_str(value)
        for member in kind:
            if member.value == text or (not sensitive and str(member.value).lower() == text.lower()):
                return member
        choices = ", ".join(repr(m.value) for m in kind)
        raise ValueError(f"{text!r} is not one of {choices}")

    return convert


_PATH_DEFAULTS = {
    "exists": False,
    "file_okay": True,
    "dir_okay": True,
    "writable": False,
    "readable": True,
    "resolve_path": False,
    "allow_dash": False,
    "path_type": None,
}


def _plain_path(info: Any) -> bool:
    return all(getattr(info, name, default) == default for name, default in _PATH_DEFAULTS.items())


def converter(annotation: Any, info: Any) -> Callable[[Any], Any] | None:
    """A converter for `annotation` with `info`'s bounds, or None when typer must do it."""
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return None
    if get_origin(annotation) is list:
        (item,) = get_args(annotation) or (str,)
        one = converter(item, info)
        return None if one is None else (lambda values: [one(v) for v in values])
    if annotation is str:
        return _to_str
    if annotation is bool:
        return _to_bool
    if annotation in (int, float):
        return _number(annotation, info)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _enum(annotation, info)
    if annotation is Path and _plain_path(info):
        return lambda value: value if isinstance(value, Path) else Path(_to_str(value))
    return None


def install() -> bool:
    """Make typer ask `converter` first for every parameter of this process (the command
    parameters, the help option, the completion options); True when the hook is in place.
    With a typer that lacks the hook, nothing changes and typer converts as it always does."""
    try:
        from typer._click.exceptions import BadParameter
        from typer._coercion import RuntimeParam
        from typer.core import _TyperParameter
    except ImportError:
        return False
    original = _TyperParameter.get_runtime_param
    if getattr(original, "plain_converters", False):
        return True

    class Plain(RuntimeParam):
        convert: Callable[[Any], Any]

        def __init__(self, parameter_info: Any, annotation: Any, convert: Callable[[Any], Any]):
            object.__setattr__(self, "parameter_info", parameter_info)
            object.__setattr__(self, "annotation", annotation)
            object.__setattr__(self, "convert", convert)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self.convert(value)
            except ValueError as exc:
                raise BadParameter(str(exc), ctx=ctx, param=param) from None

    def get_runtime_param(self: Any) -> Any:
        if getattr(self, "_runtime_param", None) is None:
            desc = self.type_descriptor
            convert = converter(desc.annotation, desc.parameter_info)
            if convert is not None:
                self._runtime_param = Plain(desc.parameter_info, desc.annotation, convert)
        return original(self)

    get_runtime_param.plain_converters = True  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param  # type: ignore[method-assign]
    return True
