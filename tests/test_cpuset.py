from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numapin.cpuset import MAX_ID, CpuSet

ids = st.frozensets(st.integers(min_value=0, max_value=2048), max_size=80)


def test_build_from_ints_iterates_in_order() -> None:
    s = CpuSet([8, 1, 0, 3, 2])
    assert list(s) == [0, 1, 2, 3, 8]
    assert len(s) == 5 and 8 in s and 4 not in s and -1 not in s


def test_cpulist_round_trip_and_ranges() -> None:
    s = CpuSet.parse("0-3,8,10-11")
    assert list(s) == [0, 1, 2, 3, 8, 10, 11]
    assert str(s) == "0-3,8,10-11"
    assert CpuSet("0-3,8") == CpuSet([0, 1, 2, 3, 8])
    assert repr(s) == "CpuSet('0-3,8,10-11')"


@pytest.mark.parametrize("text", ["", "  ", "\n", " \t\n"])
def test_blank_cpulist_is_empty(text: str) -> None:
    assert CpuSet.parse(text) == CpuSet() and not CpuSet.parse(text)


def test_surrounding_whitespace_is_tolerated() -> None:
    assert CpuSet.parse("  0-1,4\n") == CpuSet([0, 1, 4])


@pytest.mark.parametrize(
    ("text", "token"),
    [("3-1", "3-1"), ("a", "a"), ("-1", "-1"), ("1,,2", ""), ("0-", "0-"), ("1-2-3", "1-2-3"), ("0x3", "0x3"),
     ("1 ,2", "1 "), ("+1", "+1")],
)
def test_malformed_cpulist_names_the_token(text: str, token: str) -> None:
    with pytest.raises(ValueError) as info:
        CpuSet.parse(text)
    assert repr(token) in str(info.value)


def test_hex_mask_most_significant_word_first() -> None:
    assert CpuSet.parse_mask("00000000,000000ff") == CpuSet("0-7")
    assert CpuSet.parse_mask("00000001,00000000") == CpuSet([32])
    assert CpuSet.parse_mask("0000,00000000,000000ff,ff000000,00000000,00000000\n") == CpuSet("88-103")
    assert CpuSet("0-7,32").to_mask() == "00000001,000000ff"
    assert CpuSet().to_mask() == "00000000"
    assert CpuSet([1]).to_mask(words=3) == "00000000,00000000,00000002"


@pytest.mark.parametrize("text", ["", "xyz", "123456789", "ff,,ff", "0x00ff", "ff ff", "-1"])
def test_malformed_hex_mask(text: str) -> None:
    with pytest.raises(ValueError):
        CpuSet.parse_mask(text)


def test_nvml_words_least_significant_first() -> None:
    assert CpuSet.from_words([0xFF, 0x1]) == CpuSet("0-7,64")
    assert CpuSet("0-7,64").to_words() == [0xFF, 0x1]
    assert CpuSet([3]).to_words(count=4) == [8, 0, 0, 0]
    with pytest.raises(ValueError):
        CpuSet.from_words([1 << 64])
    with pytest.raises(ValueError):
        CpuSet.from_words([-1])


def test_set_algebra_and_immutability() -> None:
    a, b = CpuSet("0-3"), CpuSet("2-5")
    assert a | b == CpuSet("0-5")
    assert a & b == CpuSet("2-3")
    assert a - b == CpuSet("0-1")
    assert a ^ b == CpuSet("0-1,4-5")
    assert CpuSet("2-3") <= a and CpuSet("2-3") < a and not a < a and a >= CpuSet("1")
    assert a.isdisjoint("8-9") and not a.isdisjoint([3])
    assert a.issubset("0-7") and not a.issubset([0, 1])
    assert a.first() == 0 and a.last() == 3
    assert {a: 1}[CpuSet([0, 1, 2, 3])] == 1
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a._bits = 0  # type: ignore[misc]
    with pytest.raises(ValueError):
        CpuSet().first()


@pytest.mark.parametrize("bad", [[-1], [1.5], [True], ["1"]])
def test_bad_ids_are_rejected(bad: list[object]) -> None:
    with pytest.raises((TypeError, ValueError)):
        CpuSet(bad)  # type: ignore[arg-type]


@given(ids)
def test_cpulist_format_parse_round_trip(members: frozenset[int]) -> None:
    s = CpuSet(members)
    assert CpuSet.parse(str(s)) == s
    assert set(s) == set(members)


@given(ids)
def test_hex_mask_round_trip(members: frozenset[int]) -> None:
    s = CpuSet(members)
    assert CpuSet.parse_mask(s.to_mask()) == s


@given(ids, st.sampled_from([32, 64]))
def test_words_round_trip(members: frozenset[int], bits: int) -> None:
    s = CpuSet(members)
    assert CpuSet.from_words(s.to_words(word_bits=bits), word_bits=bits) == s


@given(st.text())
def test_parsing_arbitrary_text_raises_only_value_error(text: str) -> None:
    for parse in (CpuSet.parse, CpuSet.parse_mask):
        try:
            found = parse(text)
        except ValueError as exc:
            assert str(exc), "a refusal says what is wrong"
            continue
        # Accepted: a set of ids in range, which formats and parses back to itself.
        assert all(0 <= cpu <= MAX_ID for cpu in found) and CpuSet.parse(str(found)) == found


@given(st.text(alphabet="0123456789-, \n", max_size=30))
def test_parsing_cpulist_like_text_is_consistent(text: str) -> None:
    try:
        s = CpuSet.parse(text)
    except ValueError:
        return
    assert CpuSet.parse(str(s)) == s


@pytest.mark.parametrize("text", ["0-4000000000", "70000", "1000000000"])
def test_absurd_ids_are_refused_quickly(text: str) -> None:
    with pytest.raises(ValueError, match="65535"):
        CpuSet.parse(text)


def test_overlong_masks_are_refused() -> None:
    with pytest.raises(ValueError):
        CpuSet.parse_mask(",".join(["ffffffff"] * 5000))
    with pytest.raises(ValueError):
        CpuSet.from_words([1] * 2000)


hex_words = st.lists(st.text(alphabet="0123456789abcdefABCDEF", min_size=1, max_size=8), min_size=1, max_size=40)


@given(hex_words)
def test_hex_mask_of_words_of_any_width(words: list[str]) -> None:
    # The kernel pads every word to eight digits (read in one step); a word of
    # any other width still stands for 32 bits of its own.
    expected = 0
    for word in words:
        expected = expected << 32 | int(word, 16)
    assert CpuSet.parse_mask(",".join(words)).bits == expected


@given(st.lists(st.integers(min_value=0, max_value=MAX_ID), min_size=1, max_size=20))
def test_cpulist_of_single_ids_in_any_order(members: list[int]) -> None:
    # Sibling lists ("5,517") take parse's one-id-per-token path; repeats and any order allowed.
    assert CpuSet.parse(",".join(map(str, members)) + "\n") == CpuSet(members)
