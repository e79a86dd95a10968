"""numapin.base.frozen: frozen records behave as frozen dataclasses do, without importing dataclasses."""

from __future__ import annotations

import dataclasses

import pytest

from numapin.base.frozen import field, fields, frozen, replace


@frozen
class Point:
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    note: str = field(default="", compare=False)


@dataclasses.dataclass(frozen=True)
class Twin:
    x: int
    y: int = 0


def test_construction_matches_a_frozen_dataclass() -> None:
    assert (Point(1).x, Point(1).y, Point(1, 2).y, Point(x=3, y=4).y) == (1, 0, 2, 4)
    assert Point(1).tags == [] and Point(1).tags is not Point(1).tags  # a fresh list each time
    assert repr(Point(1, 2, ["a"])) == "Point(x=1, y=2, tags=['a'], note='')"
    assert fields(Point) == ("x", "y", "tags", "note")


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((), {}, "missing argument 'x'"),
    ((1, 2, [], "", 5), {}, "takes 4 arguments"),
    ((1,), {"z": 2}, "unexpected keyword argument 'z'"),
    ((1,), {"x": 2}, "multiple values for 'x'"),
])
def test_bad_arguments_raise_type_error(args: tuple[object, ...], kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        Point(*args, **kwargs)  # type: ignore[arg-type]


def test_frozen() -> None:
    p = Point(1)
    with pytest.raises(AttributeError, match="frozen"):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        del p.y  # type: ignore[misc]


def test_equality_and_hash_over_compared_fields() -> None:
    @frozen
    class Key:
        a: int
        label: str = field(default="", compare=False)

    assert Point(1, 2, note="a") == Point(1, 2, note="b") and Point(1, 2) != Point(1, 3)
    assert Point(1) != Twin(1)  # another class never compares equal
    assert Key(1, "x") == Key(1, "y") and len({Key(1, "x"), Key(1, "y"), Key(2)}) == 2
    with pytest.raises(TypeError, match="unhashable"):
        hash(Point(1))  # a list field, as with a frozen dataclass


def test_replace_makes_a_changed_copy() -> None:
    p = Point(1, 2, ["a"], "n")
    q = replace(p, y=5)
    assert (q.x, q.y, q.tags, q.note, p.y) == (1, 5, ["a"], "n", 2)
    with pytest.raises(TypeError, match="no field 'z'"):
        replace(p, z=1)


def test_inheritance_and_own_methods() -> None:
    @frozen
    class Base:
        a: int

        def __str__(self) -> str:
            return f"a={self.a}"

    @frozen
    class Child(Base):
        b: int = 2

        def __repr__(self) -> str:
            return "child"

    c = Child(1)
    assert (c.a, c.b, str(c), repr(c), fields(c)) == (1, 2, "a=1", "child", ("a", "b"))


def test_a_field_without_default_after_one_with_is_refused() -> None:
    with pytest.raises(TypeError, match="'b' without a default follows 'a'"):
        @frozen
        class Bad:
            a: int = 0
            b: int  # type: ignore[misc]
