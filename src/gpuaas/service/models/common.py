"""What every list route shares: keyset pagination (``?limit=&after=``) and strict inputs."""

from __future__ import annotations

import re
from decimal import Decimal
from types import UnionType
from typing import Annotated, Any, Generic, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session

from gpuaas.service.errors import invalid

T = TypeVar("T")

MAX_LIMIT = 1000
#: ``?limit=``'s bounds, as the schema says them (the routes check them with their own message)
PAGE_BOUNDS = {"minimum": 1, "maximum": MAX_LIMIT}
#: A DNS-1123 label (at most 63; the length is a separate keyword), as the OpenAPI document says
#: it: the validators check it themselves, with their own messages.
DNS_LABEL_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: a DNS-1123 subdomain (a flavor's, a cohort's, a LocalQueue's name; at most 253, said apart)
SUBDOMAIN_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: a label key or resource name, ``[prefix/]name``: a DNS-subdomain prefix, then 1-63 letters,
#: digits, ``-``, ``_``, ``.`` (at most 253 in all, said apart)
LABEL_KEY_PATTERN = (
    "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


class Strict(BaseModel):
    """Request bodies: unknown fields are errors (a typo never goes unnoticed), camelCase, and
    text is valid Unicode (JSON can carry an unpaired UTF-16 surrogate no database can store)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_number(cls, value: Any, info: ValidationInfo) -> Any:
        """JSON's ``true``/``false`` is no number: pydantic would read it as 1/0 where a field
        takes a number (and the schema says number or integer); nor is a JSON string where a
        field takes only numbers (pydantic would read ``"5"`` as 5; the schema says number)."""
        kind = type(value)
        if kind is not bool and kind is not str:  # first: the common case costs one test
            return value
        takes = _NUMBER_FIELDS.get((cls, info.field_name or ""))
        if takes is None:
            field = cls.model_fields.get(info.field_name or "")
            annotation = field.annotation if field is not None else None
            takes = (_numbers_only(annotation), _numbers_only(annotation, text=False))
            _NUMBER_FIELDS[(cls, info.field_name or "")] = takes
        if kind is bool and takes[0]:
            raise ValueError("expected a number, got a boolean")
        if kind is str and takes[1]:
            raise ValueError(f"expected a number, got a string ({value[:40]!r})")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _valid_text(cls, value: Any) -> Any:
        _check_text(value)
        return value


#: (model, field) -> whether the field refuses a boolean, and a string, as no number
_NUMBER_FIELDS: dict[tuple[type, str], tuple[bool, bool]] = {}


def _numbers_only(annotation: Any, *, text: bool = True) -> bool:
    """Whether ``annotation`` takes a number and never a boolean: a union of int, float, Decimal,
    str and None with at least one number (str and None refuse a boolean themselves);
    ``text=False``: and never a string (no str among them)."""
    members: list[Any] = []
    todo = [annotation]
    while todo:
        a = todo.pop()
        if get_origin(a) is Annotated:
            todo.append(get_args(a)[0])
        elif get_origin(a) in (Union, UnionType):
            todo.extend(get_args(a))
        else:
            members.append(a)
    numbers = {int, float, Decimal}
    others = (str, type(None)) if text else (type(None),)
    return any(m in numbers for m in members) and all(m in numbers or m in others for m in members)


def unicode_text(value: str) -> str:
    """``value`` if it encodes as UTF-8; JSON's ``\\ud800`` decodes to a str that does not."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds an unpaired UTF-16 surrogate (not Unicode text)") from None
    return value


def _check_text(value: Any) -> None:
    if isinstance(value, str):
        unicode_text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_text(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_text(item)


class Page(BaseModel, Generic[T]):
    """One page of a list; pass ``next`` as ``after`` to get the following page."""

    items: list[T]
    next: str | None = None


def paginate(
    session: Session,
    stmt: Select[Any],
    key: InstrumentedAttribute[Any],
    limit: int,
    after: str | None,
) -> tuple[list[Any], str | None]:
    """Rows of ``stmt`` ordered by the unique column ``key`` (an int id or a name), ``limit``
    at a time, starting after the cursor ``after``."""
    if limit < 1 or limit > MAX_LIMIT:
        raise invalid("limit", f"must be between 1 and {MAX_LIMIT}, got {limit}")
    if after is not None:
        stmt = stmt.where(key > _cursor(key, after))
    rows = list(session.scalars(stmt.order_by(key).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = str(getattr(rows[-1], key.key)) if more and rows else None
    return rows, next_cursor


#: an id cursor as the lists hand it out (``str(id)``), as the document's pattern says it
ID_CURSOR_PATTERN = "^(0|-?[1-9][0-9]{0,17})$"
_ID_CURSOR = re.compile(ID_CURSOR_PATTERN)


def _cursor(key: InstrumentedAttribute[Any], after: str) -> Any:
    """The cursor as the key column's type; anything this API cannot have handed out is a 422
    (a NUL byte, a number beyond a 64-bit id), never a database error."""
    bad = invalid("after", f"not a cursor this list returned: {after!r}")
    if "\x00" in after:
        raise bad
    python_type = key.type.python_type
    if python_type is int and _ID_CURSOR.fullmatch(after) is None:  # what ID_CURSOR_PATTERN says
        raise bad
    try:
        cursor: Any = python_type(after)
    except (TypeError, ValueError):
        raise bad from None
    if python_type is int and not -(2**63) <= cursor < 2**63:
        raise bad
    return cursor


class ReasonCause(BaseModel):
    """A further cause of a reason (its sentence is part of the reason's message)."""

    code: str
    fields: dict[str, Any]


class ReasonView(BaseModel):
    """Why a job (a cluster, a volume) is where it is: ``code`` from the closed set of
    :class:`gpuaas.engine.reasons.Code` (the table is in docs/architecture.md), the sentence a
    person reads, the fields it was built from, and any further causes."""

    code: str
    message: str
    fields: dict[str, Any]
    causes: list[ReasonCause] = []


#: money as a request gives it (a price per unit-hour, a budget's amount or rate cap): decimal
#: text, not negative, at most 9 decimal places, at most 1,000,000 (``service.prices.MAX_PRICE``);
#: the server matches it before parsing, so the document and the server refuse the same texts
MONEY_PATTERN = "^([0-9]{1,6}(\\.[0-9]{1,9})?|1000000(\\.0{1,9})?)$"


# --- byte quantities as the document says them -----------------------------------------------
#
# A size in bytes is Kubernetes' quantity syntax (``100Gi``, ``1.5T``, ``500000000``, ``1e9``)
# bounded so that the value fits a signed 64-bit column: at most as many digits before the
# point as keep the largest value below 2**63 for its suffix (18 with none or a sub-unit
# suffix, 15 before ``k``/``Ki``, 12 before ``M``/``Mi``, 9 before ``G``/``Gi`` or an exponent
# up to 9, 6 before ``T``/``Ti``, 3 before ``P``/``Pi``, one digit up to 8 before ``E`` and up
# to 7 before ``Ei``). One regular expression, so the document and the server (which matches
# it before parsing: ``bytes_text``) refuse exactly the same texts.
_EXPONENT = "0*([0-9]|[12][0-9]|30)"  # model.quantity refuses an exponent beyond 30
_INT_DIGITS = (
    ("[num]?", "[1-9][0-9]{0,17}"),
    ("(k|Ki)", "[1-9][0-9]{0,14}"),
    ("(M|Mi)", "[1-9][0-9]{0,11}"),
    (f"(G|Gi|[eE](\\+?0*[0-9]|-{_EXPONENT}))", "[1-9][0-9]{0,8}"),
    ("(T|Ti)", "[1-9][0-9]{0,5}"),
    ("(P|Pi)", "[1-9][0-9]{0,2}"),
    ("E", "[1-8]"),
    ("Ei", "[1-7]"),
)
_FRACTION = "0*\\.[0-9]*[1-9][0-9]*"  # below one unit, not zero
_ZERO = "(0+\\.?0*|0*\\.0+)"


def _bytes_pattern(zero: bool) -> str:
    alternatives = [f"(0*{whole}(\\.[0-9]*)?|{_FRACTION}){suffix}" for suffix, whole in _INT_DIGITS]
    if zero:
        alternatives.append(f"{_ZERO}([numkMGTPE]|[KMGTPE]i|[eE][+-]?{_EXPONENT})?")
    return "^\\+?(" + "|".join(alternatives) + ")$"


#: a positive size (a volume's): at least one byte (a fraction rounds up), below 2**63 bytes
POSITIVE_BYTES_PATTERN = _bytes_pattern(zero=False)
#: a size that may be zero (a dataset's, unknown)
BYTES_PATTERN = _bytes_pattern(zero=True)
#: the longest byte quantity text (as ``model.quantity.MAX_TEXT``)
MAX_BYTES_TEXT = 64
#: the largest amount a JSON number may say (bytes, cores, devices): below 2**63, and exactly a
#: double (a validator reading numbers as doubles reads 2**63 - 1 as 2**63, and would take
#: 9223372036854775808 as within a maximum of 2**63 - 1); the texts' digits keep them below it
MAX_AMOUNT = 9_200_000_000_000_000_000
_POSITIVE_BYTES = re.compile(POSITIVE_BYTES_PATTERN)
_BYTES = re.compile(BYTES_PATTERN)


def bytes_schema(*, zero: bool) -> dict[str, Any]:
    """The JSON Schema of a size in bytes: an integer, or a quantity text."""
    return {
        "anyOf": [
            {"type": "integer", "minimum": 0 if zero else 1, "maximum": MAX_AMOUNT},
            {
                "type": "string",
                "pattern": BYTES_PATTERN if zero else POSITIVE_BYTES_PATTERN,
                "maxLength": MAX_BYTES_TEXT,
            },
        ]
    }


def bytes_text(field: str, value: str | int, *, zero: bool) -> None:
    """422 naming ``field`` unless ``value`` is what ``bytes_schema`` says."""
    if isinstance(value, int):
        if not (0 if zero else 1) <= value <= MAX_AMOUNT:
            low = "0" if zero else "one byte"
            raise invalid(field, f"must be between {low} and 9.2e18 bytes, got {value}")
        return
    pattern = _BYTES if zero else _POSITIVE_BYTES
    if len(value) > MAX_BYTES_TEXT or pattern.fullmatch(value) is None:
        raise invalid(
            field,
            f"{value[:MAX_BYTES_TEXT]!r} is not a size in bytes below 2**63"
            f"{'' if zero else ' and above 0'} (examples: '100Gi', '1.5T', '500000000', '1e9')",
        )


#: a month ``YYYY-MM`` with a year from 0001 (datetime has no year 0): a usage or billing period
PERIOD_PATTERN = (
    "^([0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})-(0[1-9]|1[0-2])$"
)


# --- a time as a request gives it ------------------------------------------------------------
#
# POSIX seconds as text (digits, a fraction of at most 9), or an ISO-8601 date with an optional
# time of day (``T`` or a space, seconds and a fraction optional) and offset (``Z``,
# ``+HH:MM``): a date the calendar has (February 29 of leap years only; year 1 to 9999), as
# ``datetime.fromisoformat`` reads it. The server matches it first (``prices._when``), so the
# document and the server refuse the same texts; a JSON number is POSIX seconds, at least 0.
_YEAR = "([0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
_MONTH_DAY = "((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)"
_LEAP_DAY = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)-02-29"
_CLOCK = "([01][0-9]|2[0-3]):[0-5][0-9]"
_TIME_OF_DAY = f"[T ]{_CLOCK}(:[0-5][0-9](\\.[0-9]{{1,6}})?)?(Z|[+-]{_CLOCK})?"
TIME_PATTERN = (
    f"^([0-9]{{1,11}}(\\.[0-9]{{1,9}})?|({_YEAR}-{_MONTH_DAY}|{_LEAP_DAY})({_TIME_OF_DAY})?)$"
)
#: what a time must be, in words
TIME_WORDS = (
    "POSIX seconds (such as 1767225600) or an ISO-8601 date and time the calendar has "
    "(such as 2026-01-01 or 2026-01-01T00:00:00Z)"
)
