"""The job file reader's reading of scalars is YAML's: a scalar it takes as a string
without asking PyYAML's resolver (quoted, or plain and starting with a character no
implicit type starts with) is one the resolver reads as a string too, and every other
scalar is typed as PyYAML's safe loader types it."""

from __future__ import annotations

import string

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from chronod.specfile import parse_text

WORDS = [
    "on", "On", "ON", "off", "no", "No", "yes", "y", "Y", "n", "N", "true", "True", "FALSE",
    "~", "null", "Null", "NULL", "12:30", "1:00:00", "0x1f", "0o17", "017", "1_000", "+1", "-0",
    "1e3", "1.5", ".5", ".inf", "-.Inf", ".nan", "2026-12-07", "2026-12-07 10:00:00",
    "bench", "big.f0.j0", "America/New_York", "x<<", "o", "t", "f", "nope", "Tuesday",
]  # fmt: skip


def reference(text: str):
    return yaml.load(text, Loader=yaml.SafeLoader)


@pytest.mark.parametrize("word", WORDS)
@pytest.mark.parametrize("quote", ["", "'", '"'])
def test_a_scalar_reads_as_yaml_reads_it(word, quote):
    text = f"k: {quote}{word}{quote}\n"
    doc = parse_text(text, "f.yaml")
    assert not doc.problems
    want = reference(text)["k"]
    assert doc.data == {"k": want} and type(doc.data["k"]) is type(want)
    # the raw text is kept for every scalar YAML does not read as a string
    assert ("k" in doc.plain) == (type(want) is not str)


def test_a_merge_key_is_refused_and_a_quoted_one_is_a_key():
    assert "merge keys" in parse_text("a: 1\n<<: {b: 2}\n", "f.yaml").problems[0].message
    doc = parse_text("'<<': 1\n", "f.yaml")
    assert not doc.problems and doc.data == {"<<": 1}


plain = st.text(alphabet=string.ascii_letters + string.digits + "+-._:~=/ @", min_size=1, max_size=10)


@settings(max_examples=300, deadline=None)
@given(plain)
def test_any_plain_scalar_reads_as_yaml_reads_it(word):
    text = f"k: {word}\n"
    try:
        want = reference(text)
    except yaml.YAMLError:
        return  # not a scalar YAML reads at all
    if not isinstance(want, dict) or set(want) != {"k"}:
        return
    doc = parse_text(text, "f.yaml")
    if doc.problems:
        return
    assert doc.data == want and type(doc.data["k"]) is type(want["k"])
    assert ("k" in doc.plain) == (type(want["k"]) is not str)
