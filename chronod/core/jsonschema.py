"""The JSON Schema (draft 2020-12) of a job file, generated from `validate.FIELDS`.

For editors (yaml-language-server: `# yaml-language-server: $schema=...`) and CI linters.
It checks shapes, not everything: schedules, time zones and cross-field rules are
`chronoctl validate`'s job. Required job fields may come from `defaults:`, so the schema
requires only `id` in each job.
"""

from __future__ import annotations

from typing import Any

from chronod.core.validate import BLACKOUT, FIELDS, MAX_BLACKOUTS, RESOURCE, RESOURCE_PATTERN, field_schema

SCHEMA_URI = "https://json-schema.org/draft/2020-12/schema"


def spec_json_schema() -> dict[str, Any]:
    """The schema of one job file: `jobs`, `defaults`, `resources` and `blackouts`."""
    props = {f.name: field_schema(f) for f in FIELDS}
    defaults = {name: schema for name, schema in props.items() if name != "id"}
    return {
        "$schema": SCHEMA_URI,
        "$id": "urn:chrono:job-file",
        "title": "chrono job file",
        "description": "A file of a chrono registry (see chrono-jobs(5)).",
        "type": "object",
        "required": ["jobs"],
        "additionalProperties": False,
        "properties": {
            "jobs": {"type": "array", "items": {"$ref": "#/$defs/job"}},
            "defaults": {"type": "object", "properties": defaults, "additionalProperties": False},
            "resources": {
                "type": "object",
                "propertyNames": {"pattern": f"^(?:{RESOURCE_PATTERN})$"},
                "additionalProperties": RESOURCE.schema(),
            },
            "blackouts": {"type": "array", "maxItems": MAX_BLACKOUTS, "items": BLACKOUT.schema()},
        },
        "$defs": {
            "job": {
                "type": "object",
                "required": ["id"],
                "properties": props,
                "additionalProperties": False,
            }
        },
    }
