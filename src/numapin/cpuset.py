"""CpuSet: an immutable set of CPU (or NUMA node) ids.

The set is held as one Python integer used as a bitmap: set algebra is then a
single integer operation, hashing is free, and the kernel's hex-mask format is
just the integer printed in 32-bit groups.
"""

from __future__ import annotations

from .base.errors import quoted

__all__ = ["MAX_ID", "CpuSet", "CpuSpec"]

# Character checks rather than regular expressions: importing re costs a start-up more than a pin.
_DECIMAL_DIGITS = frozenset("0123456789")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def _number(text: str) -> bool:
    return bool(text) and _DECIMAL_DIGITS.issuperset(text)


def hex_word(text: str, longest: int = 8) -> bool:
    """Whether ``text`` is 1 to ``longest`` ASCII hex digits."""
    return 0 < len(text) <= longest and _HEX_DIGITS.issuperset(text)

# The kernel prints every cpumask as comma-separated groups of 32 bits.
_MASK_WORD_BITS = 32

#: The largest id accepted. Linux builds for at most 8192 CPUs (NR_CPUS) and
#: 1024 nodes; the cap keeps a typo such as "0-4000000000" from allocating a
#: bitmap of gigabytes.
MAX_ID = (1 << 16) - 1
_ID_DIGITS = len(str(MAX_ID))



def _bits_of(ids: Iterable[int]) -> int:
    bits = 0
    for cpu in ids:
        if isinstance(cpu, bool) or not isinstance(cpu, int):
            raise TypeError(f"CPU ids must be integers, got {cpu!r}")
        if not 0 <= cpu <= MAX_ID:
            raise ValueError(f"CPU ids must lie in 0..{MAX_ID}, got {cpu}")
        bits |= 1 << cpu
    return bits


class CpuSet:
    """An immutable, hashable, ordered set of non-negative ids.

    ``CpuSet([0, 1, 8])`` builds one from integers, ``CpuSet("0-3,8")`` (or
    :meth:`parse`) from a Linux cpulist; ``str()`` gives the cpulist back.
    Iteration is in ascending order. The usual set operators (``| & - ^``,
    ``<=``, ``<``, ``in``) return or compare CpuSets.
    """

    __slots__ = ("_bits",)

    _bits: int

    def __init__(self, ids: CpuSpec = ()) -> None:
        if isinstance(ids, CpuSet):
            bits = ids._bits
        elif isinstance(ids, str):
            bits = CpuSet.parse(ids)._bits
        else:
            bits = _bits_of(ids)
        object.__setattr__(self, "_bits", bits)

    # -- construction -----------------------------------------------------

    @classmethod
    def from_bits(cls, bits: int) -> CpuSet:
        """The set whose members are the 1-bits of ``bits`` (bit n = id n)."""
        if bits < 0 or bits.bit_length() > MAX_ID + 1:
            raise ValueError(f"a bitmap must be non-negative with ids up to {MAX_ID}")
        new = cls.__new__(cls)
        object.__setattr__(new, "_bits", bits)
        return new

    @classmethod
    def parse(cls, text: str) -> CpuSet:
        """Parse a Linux cpulist such as ``"0-3,8,10-11"``.

        Surrounding whitespace is ignored and an empty (or blank) string is the
        empty set. Anything else that is not a comma-separated list of ``N`` or
        ``N-M`` (with N <= M) raises ValueError naming the offending token.
        """
        bits = 0
        body = text.strip()
        for token in body.split(",") if body else ():
            if len(token) <= 5 and token.isdigit() and token.isascii():  # one id: the common token, checked cheaply
                value = int(token)
                if value <= MAX_ID:
                    bits |= 1 << value
                    continue
            first, dash, last = token.partition("-")
            if not _number(first) or (dash and not _number(last)):
                raise ValueError(f"bad cpulist token {quoted(token)} in {quoted(text)}")
            if len(first.lstrip("0")) > _ID_DIGITS or len(last.lstrip("0")) > _ID_DIGITS:  # before int() meets them
                raise ValueError(f"bad cpulist token {quoted(token)} in {quoted(text)}: ids stop at {MAX_ID}")
            lo = int(first)
            hi = int(last) if dash else lo
            if hi > MAX_ID:
                raise ValueError(f"bad cpulist token {quoted(token)} in {quoted(text)}: ids stop at {MAX_ID}")
            if hi < lo:
                raise ValueError(f"bad cpulist token {quoted(token)} in {quoted(text)}: range runs backwards")
            bits |= ((1 << (hi - lo + 1)) - 1) << lo
        # Every id was checked against MAX_ID: no from_bits check needed.
        new = cls.__new__(cls)
        object.__setattr__(new, "_bits", bits)
        return new

    @classmethod
    def parse_or_none(cls, text: str | None) -> CpuSet | None:
        """:meth:`parse`, or None for no text or a malformed one: the one reader of a cpulist that may be absent
        or damaged (a file another program wrote, an environment variable)."""
        if text is None:
            return None
        try:
            return cls.parse(text)
        except ValueError:
            return None

    @classmethod
    def parse_mask(cls, text: str) -> CpuSet:
        """Parse the kernel's hex mask (``cpumap``, ``local_cpus``, ``Cpus_allowed``).

        The format is comma-separated 32-bit hex words, most significant first,
        e.g. ``"00000000,000000ff"``; any number of words is accepted.
        """
        body = text.strip()
        if not body:
            raise ValueError("empty hex mask")
        words = body.split(",")
        if len(words) * _MASK_WORD_BITS > MAX_ID + 1:
            raise ValueError(f"hex mask of {len(words)} words is longer than ids go ({MAX_ID})")
        digits = body.replace(",", "")
        if len(digits) == 8 * len(words) and _HEX_DIGITS.issuperset(digits):
            # The kernel's own layout, every word eight digits: the words side by side are the number.
            return cls.from_bits(int(digits, 16))
        bits = 0
        for word in words:
            if not hex_word(word):
                raise ValueError(f"bad hex mask word {quoted(word)} in {quoted(text)}")
            bits = (bits << _MASK_WORD_BITS) | int(word, 16)
        return cls.from_bits(bits)

    @classmethod
    def from_words(cls, words: Sequence[int], word_bits: int = 64) -> CpuSet:
        """Build from an array of words, least significant first (NVML's layout)."""
        if len(words) * word_bits > MAX_ID + 1:
            raise ValueError(f"{len(words)} words of {word_bits} bits are longer than ids go ({MAX_ID})")
        bits = 0
        limit = 1 << word_bits
        for index, word in enumerate(words):
            if isinstance(word, bool) or not isinstance(word, int) or not 0 <= word < limit:
                raise ValueError(f"word {index} ({word!r}) is not an unsigned {word_bits}-bit value")
            bits |= word << (index * word_bits)
        return cls.from_bits(bits)

    # -- formatting -------------------------------------------------------

    def to_mask(self, words: int | None = None) -> str:
        """The kernel's hex mask format; ``words`` pads to that many 32-bit words."""
        needed = max(1, -(-self._bits.bit_length() // _MASK_WORD_BITS))
        count = max(needed, words or 0)
        mask = (1 << _MASK_WORD_BITS) - 1
        return ",".join(
            f"{(self._bits >> (_MASK_WORD_BITS * i)) & mask:08x}" for i in reversed(range(count))
        )

    def to_words(self, count: int | None = None, word_bits: int = 64) -> list[int]:
        """Words least significant first, as NVML returns affinity masks."""
        needed = max(1, -(-self._bits.bit_length() // word_bits))
        total = max(needed, count or 0)
        mask = (1 << word_bits) - 1
        return [(self._bits >> (word_bits * i)) & mask for i in range(total)]

    def ranges(self) -> Iterator[tuple[int, int]]:
        """Maximal runs ``(first, last)`` in ascending order."""
        bits = self._bits
        while bits:
            lo = (bits & -bits).bit_length() - 1
            # Adding the lowest bit of a run carries through the whole run.
            run_end = ((bits >> lo) + 1) & ~(bits >> lo)
            length = run_end.bit_length() - 1
            yield lo, lo + length - 1
            bits &= ~(((1 << length) - 1) << lo)

    def __str__(self) -> str:
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.ranges())

    def __repr__(self) -> str:
        return f"CpuSet({str(self)!r})"

    # -- set protocol -----------------------------------------------------

    @property
    def bits(self) -> int:
        return self._bits

    def __iter__(self) -> Iterator[int]:
        # Each run added in one step (in C), rather than a generator step per id.
        ids: list[int] = []
        for lo, hi in self.ranges():
            ids.extend(range(lo, hi + 1))
        return iter(ids)

    def __len__(self) -> int:
        return self._bits.bit_count()

    def __bool__(self) -> bool:
        return self._bits != 0

    def __contains__(self, cpu: object) -> bool:
        return isinstance(cpu, int) and cpu >= 0 and bool(self._bits >> cpu & 1)

    def __hash__(self) -> int:
        return hash(self._bits)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CpuSet):
            return self._bits == other._bits
        return NotImplemented

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CpuSet is immutable")

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return (CpuSet.from_bits, (self._bits,))

    def __or__(self, other: CpuSet) -> CpuSet:
        return CpuSet.from_bits(self._bits | _coerce(other)._bits)

    def __and__(self, other: CpuSet) -> CpuSet:
        return CpuSet.from_bits(self._bits & _coerce(other)._bits)

    def __sub__(self, other: CpuSet) -> CpuSet:
        return CpuSet.from_bits(self._bits & ~_coerce(other)._bits)

    def __xor__(self, other: CpuSet) -> CpuSet:
        return CpuSet.from_bits(self._bits ^ _coerce(other)._bits)

    def __le__(self, other: CpuSet) -> bool:
        return self._bits & ~_coerce(other)._bits == 0

    def __lt__(self, other: CpuSet) -> bool:
        return self <= other and self != other

    def __ge__(self, other: CpuSet) -> bool:
        return _coerce(other) <= self

    def __gt__(self, other: CpuSet) -> bool:
        return _coerce(other) < self

    def issubset(self, other: CpuSpec) -> bool:
        return self <= CpuSet(other)

    def isdisjoint(self, other: CpuSpec) -> bool:
        return not self._bits & CpuSet(other)._bits

    def first(self) -> int:
        """The smallest id; ValueError on the empty set."""
        if not self._bits:
            raise ValueError("empty CpuSet has no first element")
        return (self._bits & -self._bits).bit_length() - 1

    def last(self) -> int:
        """The largest id; ValueError on the empty set."""
        if not self._bits:
            raise ValueError("empty CpuSet has no last element")
        return self._bits.bit_length() - 1

    @staticmethod
    def union(sets: Iterable[CpuSet]) -> CpuSet:
        bits = 0
        for item in sets:
            bits |= item._bits
        return CpuSet.from_bits(bits)


def _coerce(value: object) -> CpuSet:
    if isinstance(value, CpuSet):
        return value
    raise TypeError(f"expected a CpuSet, got {type(value).__name__}")


TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    #: Anything the API accepts where it asks for CPUs.
    CpuSpec = CpuSet | Iterable[int] | str
else:
    CpuSpec = object  # annotations only (they are strings at run time)
