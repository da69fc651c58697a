"""The JSON Schema of a job file is generated from the validation table and accepts the examples."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from chronod.core.jsonschema import spec_json_schema
from chronod.core.model import JobSpec
from chronod.core.validate import FIELDS
from chronod.specfile import parse_text

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs.yaml"


def errors(schema: dict[str, Any], value: Any, root: dict[str, Any], at: str = "$") -> list[str]:
    """A small checker for the draft 2020-12 keywords the generated schema uses."""
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return errors(target, value, root, at)
    found: list[str] = []
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    kind = schema.get("type")
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return [f"{at}: not an integer"]
    elif kind and not isinstance(value, kinds[kind]):
        return [f"{at}: not {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{at}: not in enum")
    if "minimum" in schema and value < schema["minimum"] or "maximum" in schema and value > schema["maximum"]:
        found.append(f"{at}: out of range")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 10**9):
            found.append(f"{at}: length")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            found.append(f"{at}: pattern")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", 10**9):
            found.append(f"{at}: item count")
        for i, item in enumerate(value):
            found += errors(schema.get("items", {}), item, root, f"{at}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        found += [f"{at}: missing {k}" for k in schema.get("required", []) if k not in value]
        for key, item in value.items():
            if "propertyNames" in schema:
                found += errors(schema["propertyNames"], key, root, f"{at}.{key}(name)")
            if key in props:
                found += errors(props[key], item, root, f"{at}.{key}")
            elif schema.get("additionalProperties") is False:
                found.append(f"{at}: unexpected {key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                found += errors(schema["additionalProperties"], item, root, f"{at}.{key}")
    if "anyOf" in schema and all(errors(s, value, root, at) for s in schema["anyOf"]):
        found.append(f"{at}: matches none of anyOf")
    if "oneOf" in schema and sum(not errors(s, value, root, at) for s in schema["oneOf"]) != 1:
        found.append(f"{at}: does not match exactly one of oneOf")
    if "not" in schema and not errors(schema["not"], value, root, at):
        found.append(f"{at}: matches a forbidden schema")
    return found


def example_data() -> dict[str, Any]:
    return parse_text(EXAMPLES.read_text(), str(EXAMPLES)).data


def test_the_schema_is_draft_2020_12_and_plain_json():
    schema = spec_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert json.loads(json.dumps(schema)) == schema


def test_every_field_of_the_table_and_of_the_job_spec_is_in_the_schema():
    job = spec_json_schema()["$defs"]["job"]["properties"]
    internal = {"max_silence_explicit", "source_file", "source_line"}
    assert set(job) == {f.name for f in FIELDS} == {f.name for f in fields(JobSpec)} - internal
    assert set(spec_json_schema()["properties"]["defaults"]["properties"]) == set(job) - {"id"}
    assert all(job[f.name].get("description") for f in FIELDS)


def test_the_examples_validate_against_the_schema():
    schema = spec_json_schema()
    assert errors(schema, example_data(), schema) == []


@pytest.mark.parametrize(
    "change, complaint",
    [
        (lambda d: d["jobs"][0].update(schedul="x"), "unexpected schedul"),
        (lambda d: d["jobs"][0].update(overlap="sometimes"), "overlap: not in enum"),
        (lambda d: d["jobs"][0].update(id="Bad Id"), "id: pattern"),
        (lambda d: d["jobs"][0].update(env={"CHRONO_RUN_ID": "x"}), "matches a forbidden schema"),
        (lambda d: d["jobs"][1]["notify"][0].update(webhook="https://h.example.com"), "exactly one of oneOf"),
        (lambda d: d["jobs"][0].update(retry={"attempts": 0}), "attempts: out of range"),
    ],
)
def test_the_schema_refuses_what_validation_refuses(change, complaint):
    schema, data = spec_json_schema(), example_data()
    change(data)
    assert any(complaint in e for e in errors(schema, data, schema))


def test_the_real_jsonschema_library_agrees_when_it_is_installed():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(spec_json_schema())
    jsonschema.validate(example_data(), spec_json_schema(), cls=jsonschema.Draft202012Validator)
