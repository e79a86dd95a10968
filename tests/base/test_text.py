"""json_text: what json.dumps(value, sort_keys=True) writes, for every value a record holds."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numapin.base.text import json_text

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),  # any code point: control characters, lone surrogates, beyond the basic plane
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=1000, deadline=None)
@given(VALUES)
def test_json_text_writes_what_json_writes(value: object) -> None:
    assert json_text(value) == json.dumps(value, sort_keys=True)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1: 2}, {"a": object()}, b"bytes"])
def test_what_json_would_not_write_plainly_is_refused(value: object) -> None:
    with pytest.raises(TypeError):
        json_text(value)


def test_json_already_written_is_put_in_as_it_is() -> None:
    from numapin.base.text import Written, json_text

    entry = Written(json_text({"b": 1, "a": "x"}))
    assert json_text({"z": [entry, entry], "y": entry}) == '{"y": {"a": "x", "b": 1}, "z": [{"a": "x", "b": 1}, ' \
        '{"a": "x", "b": 1}]}'
    assert json_text("plain") == '"plain"'  # a plain string is still a JSON string
