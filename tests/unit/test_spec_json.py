"""A spec's stored JSON text, written field by field (`json_text_and_hash`), is the text
json.dumps makes of its dict, and its hash the one `spec_hash` computes that way."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from chronod.core.model import JobSpec, Notify, Retry, RunOn, json_text_and_hash

text = st.text(max_size=12)  # any character: quotes, backslashes, controls, beyond ASCII
maybe = st.none() | text
whole = st.integers(min_value=-(2**70), max_value=2**70)


@st.composite
def specs(draw) -> JobSpec:
    return JobSpec(
        id=draw(text),
        owner=draw(text),
        schedule=draw(text),
        command=draw(text | st.lists(text, max_size=3).map(tuple)),
        idempotency_class=draw(text),
        timezone=draw(text),
        tolerance_s=draw(whole),
        tolerance_reason=draw(maybe),
        timeout_s=draw(st.none() | whole),
        retry=draw(st.builds(Retry, whole, whole, whole)),
        max_silence_s=draw(st.none() | whole),
        max_silence_explicit=draw(st.booleans()),
        run_on=draw(st.builds(RunOn, text, st.lists(text, max_size=2).map(tuple))),
        user=draw(maybe),
        env=draw(st.lists(st.tuples(text, text), max_size=3).map(tuple)),
        stdin=draw(maybe),
        notify=draw(
            st.lists(st.builds(Notify, st.lists(text, max_size=2).map(tuple), maybe, maybe, whole), max_size=1).map(
                tuple
            )
        ),
        tags=draw(st.lists(text, max_size=3).map(tuple)),
        enabled=draw(st.booleans()),
        source_file=draw(text),
        source_line=draw(whole),
    )


@settings(max_examples=400, deadline=None)
@given(specs())
def test_the_text_and_hash_are_the_dicts(spec):
    d = spec.to_json_dict()
    want = json.dumps(d, sort_keys=True)
    del d["source_file"], d["source_line"]
    copy = dataclasses.replace(spec)  # no hash kept yet
    got, digest = json_text_and_hash(copy)
    assert got == want
    assert digest == spec.spec_hash() == copy.spec_hash()
    assert json.loads(got) == json.loads(want)
