"""Kubernetes resource quantities, parsed exactly.

Kubernetes writes quantities as ``"500m"``, ``"64Gi"``, ``"1.5"`` or ``"2e3"``. Floats would drift
(``0.1 + 0.2``), so a quantity holds an exact :class:`fractions.Fraction` and converts to the
integers the scheduler compares: milli-units for CPU-like resources and whole units (bytes) for
memory-like ones, rounding up as Kubernetes does.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import total_ordering

from gpuaas.model.errors import InvalidValue

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_PATTERN = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?\d+))?$"
)


def _round_up(amount: Fraction) -> int:
    """Round away from zero, as Kubernetes' ``inf.RoundUp`` does (-0.5m is -1m, not 0)."""
    return math.ceil(amount) if amount >= 0 else -math.ceil(-amount)


#: The longest quantity text accepted: Kubernetes' own quantities fit 64-bit integers with a
#: scale, far below this; a longer text is refused before it reaches ``int()``/``Fraction``.
MAX_TEXT = 64


@total_ordering
@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact amount, as Kubernetes' ``resource.Quantity`` is."""

    amount: Fraction

    @classmethod
    def parse(cls, text: str | int | float | Quantity, field: str = "quantity") -> Quantity:
        """Parse Kubernetes' quantity syntax; ``field`` names the value in errors."""
        if isinstance(text, Quantity):
            return text
        if isinstance(text, bool):
            raise InvalidValue(field, f"expected a quantity, got {text!r}")
        if isinstance(text, numbers.Integral):  # also numpy integers from CSV readers
            return cls(Fraction(int(text)))
        if isinstance(text, numbers.Real):
            value = float(text)
            if not math.isfinite(value):
                raise InvalidValue(field, f"expected a finite quantity, got {text!r}")
            return cls(Fraction(repr(value)))
        if not isinstance(text, str):
            raise InvalidValue(field, f"expected a quantity string, got {type(text).__name__}")
        if len(text) > MAX_TEXT:  # before any parsing: Python refuses int() of 4,301+ digits
            raise InvalidValue(
                field, f"a quantity is at most {MAX_TEXT} characters, got {len(text)}"
            )
        match = _PATTERN.fullmatch(text.strip())
        if match is None:
            raise InvalidValue(
                field,
                f"{text!r} is not a quantity (examples: '500m', '64Gi', '1.5', '2', '1e3')",
            )
        number = Fraction(match["num"] if not match["num"].endswith(".") else match["num"][:-1])
        if match["exp"] is not None:
            exponent = int(match["exp"])
            if abs(exponent) > 30:
                raise InvalidValue(field, f"{text!r}: exponent {exponent} is out of range")
            number *= Fraction(10) ** exponent
        else:
            suffix = match["suffix"] or ""
            number *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
        if match["sign"] == "-":
            number = -number
        return cls(number)

    @classmethod
    def from_milli(cls, milli: int) -> Quantity:
        return cls(Fraction(milli, 1000))

    def milli(self) -> int:
        """Milli-units, rounded up (Kubernetes' ``MilliValue``)."""
        return _round_up(self.amount * 1000)

    def value(self) -> int:
        """Whole units, rounded up (Kubernetes' ``Value``): bytes for memory."""
        return _round_up(self.amount)

    def is_negative(self) -> bool:
        return self.amount < 0

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.amount + other.amount)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.amount - other.amount)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.amount < other.amount

    def compare_to(self, other: Quantity) -> int:
        """-1, 0 or 1, like Kubernetes' ``Quantity.Cmp`` (and CEL's ``compareTo``)."""
        return (self.amount > other.amount) - (self.amount < other.amount)

    def __str__(self) -> str:
        return format_quantity(self)


def format_quantity(quantity: Quantity) -> str:
    """Canonical text: the shortest exact form, binary suffix on a tie (``64Gi``, ``1k``, ``1E``).

    Whole amounts take the largest binary or decimal suffix dividing them; fractions take ``m``,
    ``u`` or ``n``; anything finer than a nano-unit rounds up, as Kubernetes does.
    """
    amount = quantity.amount
    if amount == 0:
        return "0"
    sign = "-" if amount < 0 else ""
    amount = abs(amount)
    if amount.denominator == 1:
        whole = amount.numerator
        candidates = [str(whole)]
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if whole % _BINARY[suffix] == 0:
                candidates.append(f"{whole // _BINARY[suffix]}{suffix}")
                break
        for suffix in ("E", "P", "T", "G", "M", "k"):
            factor = _DECIMAL[suffix].numerator
            if whole % factor == 0:
                candidates.append(f"{whole // factor}{suffix}")
                break
        # Shortest wins; on a tie the binary form (listed before the decimal one) is kept.
        best = min(candidates, key=lambda text: (len(text), not text.endswith("i")))
        return f"{sign}{best}"
    for suffix in ("m", "u", "n"):
        scaled = amount / _DECIMAL[suffix]
        if scaled.denominator == 1:
            return f"{sign}{scaled.numerator}{suffix}"
    return f"{sign}{math.ceil(amount * 10**9)}n"


def parse_milli(text: str | int | float, field: str = "quantity") -> int:
    """Milli-units of a quantity, e.g. CPU: ``"500m"`` -> 500, ``"2"`` -> 2000."""
    return Quantity.parse(text, field).milli()


def parse_bytes(text: str | int | float, field: str = "quantity") -> int:
    """Whole units of a quantity, e.g. memory: ``"64Gi"`` -> 68719476736."""
    return Quantity.parse(text, field).value()
