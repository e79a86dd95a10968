"""numapin.base.choices: closed sets that behave as the enum members numapin used before, without enum."""

from __future__ import annotations

import copy
import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numapin.base.choices import Choice, Numbered, parse_choice
from numapin.base.errors import UsageError
from numapin.base.text import json_text
from numapin.kernel.mempolicy import KernelMemoryPolicy
from numapin.placement.modes import PlacementMode


class Colour(Choice):
    """A closed set of this test's own."""

    RED = "red"
    """A member's docstring is no member."""
    DARK_BLUE = "dark-blue"

    def shout(self) -> str:
        return self.value.upper()


def test_members_are_the_constants_in_order_each_an_instance_and_its_text() -> None:
    assert list(Colour) == [Colour.RED, Colour.DARK_BLUE] and len(Colour) == 2
    assert isinstance(Colour.RED, Colour) and isinstance(Colour.RED, str)
    assert Colour.RED == "red" and str(Colour.DARK_BLUE) == "dark-blue" and f"{Colour.RED:>5}" == "  red"
    assert (Colour.RED.name, Colour.RED.value) == ("RED", "red") and type(Colour.RED.value) is str
    assert hash(Colour.RED) == hash("red") and {"red": 1}[Colour.RED] == 1
    assert repr(Colour.DARK_BLUE) == "<Colour.DARK_BLUE: 'dark-blue'>"
    assert Colour.RED.shout() == "RED", "methods of the set are kept, not taken for members"


def test_a_member_is_found_by_value_and_name_and_stays_itself() -> None:
    assert Colour("red") is Colour.RED is Colour(Colour.RED) is Colour["RED"]
    assert pickle.loads(pickle.dumps(Colour.RED)) is Colour.RED
    assert copy.copy(Colour.RED) is Colour.RED is copy.deepcopy(Colour.RED)
    assert json.loads(json.dumps({"c": Colour.RED})) == {"c": "red"} and json_text([Colour.RED]) == '["red"]'
    assert "red" in Colour and Colour.RED in Colour and "green" not in Colour


@pytest.mark.parametrize("value", ["green", "RED", None, 1, ["red"]])
def test_anything_else_is_no_member(value: object) -> None:
    with pytest.raises(ValueError, match="is not a valid Colour"):
        Colour(value)


def test_members_cannot_be_replaced_nor_repeat_a_value() -> None:
    with pytest.raises(AttributeError, match="cannot reassign"):
        Colour.RED = "blue"  # type: ignore[misc]
    with pytest.raises(TypeError, match="repeats the value"):
        type("Twice", (Choice,), {"A": "x", "B": "x"})


def test_numbered_members_are_the_kernels_numbers() -> None:
    assert KernelMemoryPolicy(2) is KernelMemoryPolicy.BIND is KernelMemoryPolicy["BIND"]
    bind: int = KernelMemoryPolicy.BIND
    assert bind == 2 and bind + 1 == 3 and str(KernelMemoryPolicy.BIND) == "2"
    assert isinstance(KernelMemoryPolicy.LOCAL, Numbered) and [int(m) for m in KernelMemoryPolicy] == list(range(6))
    with pytest.raises(ValueError):
        KernelMemoryPolicy(42)


@given(st.text(max_size=12))
def test_parse_choice_takes_a_value_or_names_the_accepted_ones(text: str) -> None:
    try:
        found = parse_choice(PlacementMode, text, "placement mode")
    except UsageError as exc:
        assert text not in [m.value for m in PlacementMode]
        assert exc.value == text and "expected one of: node, socket" in str(exc)
        return
    assert found is PlacementMode(text) and found.value == text
