"""chrono-jobs(5) documents every field of the validation table and renders without warnings."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from chronod.core.validate import FIELDS, NOTIFY_FIELDS, RESOURCE_FIELDS, RETRY_FIELDS, TOP_LEVEL_KEYS

MAN = Path(__file__).resolve().parents[2] / "man" / "chrono-jobs.5"


def man_words() -> set[str]:
    text = MAN.read_text().replace("\\-", "-")
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


@pytest.mark.parametrize("name", [f.name for f in FIELDS])
def test_every_job_field_is_in_the_manual(name):
    assert name in man_words()


def test_nested_fields_and_top_level_keys_are_in_the_manual():
    names = [f.name for f in RETRY_FIELDS + NOTIFY_FIELDS + RESOURCE_FIELDS] + list(TOP_LEVEL_KEYS)
    assert [n for n in names if n not in man_words()] == []


def test_every_field_has_its_own_entry_in_the_fields_section():
    fields_section = MAN.read_text().split(".SH FIELDS", 1)[1].split(".SH ", 1)[0]
    pairs = re.findall(r'^\.BR (\w+)(?: ", " (\w+))? ', fields_section, re.M)
    entries = {name for pair in pairs for name in pair if name}
    assert {f.name for f in FIELDS} - entries == set()


def test_the_manual_renders_with_groff_without_warnings():
    if shutil.which("groff") is None:
        pytest.skip("GROFF IS MISSING: chrono-jobs(5) was not rendered; install groff to run this check")
    done = subprocess.run(["groff", "-man", "-ww", "-z", str(MAN)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""


def test_every_metric_chronod_exports_is_in_its_manual():
    from chronod.daemon.metrics import Metrics

    text = (MAN.parent / "chronod.8").read_text().replace("\\-", "-")
    section = text[text.index(".SH METRICS") : text.index(".SH", text.index(".SH METRICS") + 1)]
    documented = set(re.findall(r"^\.TP\n\.B ([a-z_]+)", section, re.M))
    exported = {
        m.name.removesuffix("_total") + ("_total" if m.type == "counter" else "") for m in Metrics().registry.collect()
    }
    assert exported - documented == set()
    assert documented - exported == set()
