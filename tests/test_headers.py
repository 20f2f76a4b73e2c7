from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_costsched.headers import (
    MAX_ETAG_LENGTH,
    ETag,
    InvalidHeader,
    format_http_date,
    parse_etag,
    parse_http_date,
    parse_last_modified,
    parse_retry_after,
)

if TYPE_CHECKING:
    from collections.abc import Callable

FAST = settings(max_examples=200, deadline=None)
SUNDAY = 784111777.0  # Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example
LATEST = 253402300799  # 9999-12-31 23:59:59 GMT


def attempt(call: Callable[[], object]) -> tuple[object, str | None]:
    """The result of *call*, or the kind of the InvalidHeader it raised; anything else escapes."""
    try:
        return call(), None
    except InvalidHeader as error:
        return None, error.kind


def kind_of(call: object) -> str:
    assert callable(call)
    with pytest.raises(InvalidHeader) as info:
        call()
    return info.value.kind


# ---- ETag ----


def test_no_etag_is_none() -> None:
    assert parse_etag([]) is None


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([b'"abc"'], ETag('"abc"')),
        ([b'W/"abc"'], ETag('"abc"', weak=True)),
        ([b' \tW/"abc"\t '], ETag('"abc"', weak=True)),
        ([b'""'], ETag('""')),
        ([b'"a,b"'], ETag('"a,b"')),  # a comma inside the quotes is an etagc
        ([b'"a\\"'], ETag('"a\\"')),  # no escapes in entity-tags: the backslash is the last etagc
        ([b'"caf\xe9"'], ETag('"caf\xe9"')),  # obs-text, decoded as latin-1
        ([b'"abc"', b' "abc" '], ETag('"abc"')),  # the same tag twice
        ([b'"abc", "abc"'], ETag('"abc"')),  # the same tag twice, joined by a proxy
    ],
)
def test_parse_etag(values: list[bytes], expected: ETag) -> None:
    assert parse_etag(values) == expected


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        ([b""], "etag_empty"),
        ([b" \t "], "etag_empty"),
        ([b"", b"  "], "etag_empty"),
        ([b'"a"', b'"b"'], "etag_duplicated"),
        ([b'W/"a"', b'"a"'], "etag_duplicated"),  # weak and strong mixed
        ([b'"a"', b""], "etag_duplicated"),
        ([b'"a", "b"'], "etag_duplicated"),
        ([b'W/"a",W/"b"'], "etag_duplicated"),
        ([b'"a,b", "c"'], "etag_duplicated"),
        ([b"abc"], "etag_unquoted"),
        ([b"W/abc"], "etag_unquoted"),
        ([b"*"], "etag_unquoted"),
        ([b'"' + b"x" * (MAX_ETAG_LENGTH - 1) + b'"'], "etag_oversized"),
        ([b'W/"' + b"x" * (MAX_ETAG_LENGTH - 3) + b'"'], "etag_oversized"),
        ([b"x" * 1_000_000], "etag_oversized"),
        ([b'w/"x"'], "etag_malformed"),  # the W is case-sensitive
        ([b'"a"b"'], "etag_malformed"),
        ([b'"abc'], "etag_malformed"),
        ([b'abc"'], "etag_malformed"),
        ([b'"a b"'], "etag_malformed"),
        ([b'"a\x01"'], "etag_malformed"),
        ([b'"a\x7f"'], "etag_malformed"),
        ([b'W/ "a"'], "etag_malformed"),
        ([b'"a"\r\n'], "etag_malformed"),  # only SP and HTAB are trimmed
    ],
)
def test_parse_etag_invalid(values: list[bytes], kind: str) -> None:
    assert kind_of(lambda: parse_etag(values)) == kind


def test_etag_at_max_length_is_accepted() -> None:
    strong = b'"' + b"x" * (MAX_ETAG_LENGTH - 2) + b'"'
    weak = b'W/"' + b"x" * (MAX_ETAG_LENGTH - 4) + b'"'
    assert parse_etag([strong]) == ETag(strong.decode())
    assert parse_etag([weak]) == ETag(weak[2:].decode(), weak=True)


def test_invalid_header_is_a_value_error_with_a_kind() -> None:
    with pytest.raises(ValueError, match="unquoted ETag: 'abc'") as info:
        parse_etag([b"abc"])
    assert isinstance(info.value, InvalidHeader)
    assert info.value.kind == "etag_unquoted"


def test_header_value() -> None:
    assert ETag('"abc"').header_value() == b'"abc"'
    assert ETag('"abc"', weak=True).header_value() == b'W/"abc"'
    assert ETag('"caf\xe9"').header_value() == b'"caf\xe9"'


def test_weak_match() -> None:
    strong, weak = ETag('"abc"'), ETag('"abc"', weak=True)
    assert strong.weak_match(weak)
    assert weak.weak_match(strong)
    assert weak.weak_match(weak)
    assert not strong.weak_match(ETag('"abd"'))
    assert not weak.weak_match(ETag('"ABC"', weak=True))


def test_json_round_trip() -> None:
    for etag in (ETag('"abc"'), ETag('"abc"', weak=True), ETag('""'), ETag('"a,b\xff"', weak=True)):
        assert ETag.from_json(etag.to_json()) == etag
    assert ETag('"abc"', weak=True).to_json() == 'W/"abc"'


@pytest.mark.parametrize(
    "data",
    [None, 1, b'"abc"', ["W/", '"abc"'], "", "abc", ' "abc"', 'w/"abc"', '"a", "b"', '"\u20ac"', '"' + "x" * 300 + '"'],
)
def test_from_json_rejects_anything_else(data: object) -> None:
    assert kind_of(lambda: ETag.from_json(data)) == "etag_malformed"


def test_etag_checks_its_opaque_tag() -> None:
    assert kind_of(lambda: ETag("abc")) == "etag_malformed"
    assert kind_of(lambda: ETag('W/"abc"')) == "etag_malformed"
    assert kind_of(lambda: ETag('"' + "x" * MAX_ETAG_LENGTH + '"')) == "etag_oversized"


# ---- dates ----


@pytest.mark.parametrize(
    "value",
    [
        b"Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
        b"Sunday, 06-Nov-94 08:49:37 GMT",  # obsolete RFC 850
        b"Sun Nov  6 08:49:37 1994",  # asctime, no zone: GMT
        "Sun, 06 Nov 1994 08:49:37 GMT",
        b"  Sun, 06 Nov 1994 08:49:37 GMT ",
        b"Sun, 06 Nov 1994 08:49:37 +0000",
        b"Sun, 06 Nov 1994 09:49:37 +0100",
        b"Sun, 06 Nov 1994 08:49:37 -0000",  # RFC 5322's "zone unknown": GMT, not local time
        b"Sun, 06 Nov 1994 08:49:37 UT",
        b"06 Nov 1994 08:49:37 GMT",
    ],
)
def test_parse_http_date(value: bytes | str) -> None:
    assert parse_http_date(value) == SUNDAY


def test_parse_http_date_absent() -> None:
    assert parse_http_date(None) is None


def test_parse_http_date_range_ends() -> None:
    assert parse_http_date(b"Thu, 01 Jan 1970 00:00:00 GMT") == 0.0
    assert parse_http_date(b"Fri, 31 Dec 9999 23:59:59 GMT") == LATEST


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"   ",
        "",
        b"yesterday",
        b"Sun, 06 Nov 1994",  # no time
        b"Sun, 06 Nov 1994 24:00:00 GMT",
        b"Sun, 06 Nov 1994 08:49:60 GMT",  # leap seconds are not representable
        b"Sun, 31 Feb 1994 08:49:37 GMT",
        b"Sun, 06 Nov 1994 08:49:37 +9999",  # a zone of 4 days: ValueError inside the stdlib
        b"Sun, 06 Nov 1994 08:49:37 -99999999999999999999",  # OverflowError inside the stdlib
        b"Wed, 31 Dec 1969 23:59:59 GMT",  # before the epoch
        b"Thu, 01 Jan 1970 00:30:00 +0100",
        b"Fri, 31 Dec 9999 23:59:59 -0100",  # after year 9999 once in GMT
        b"Sat, 01 Jan 10000 00:00:00 GMT",
        b"Sun, 06 Nov 1994 08:49:37 GMT" + b" " * 80,  # longer than 100 characters
        b"\xff\xfe\x00",
    ],
)
def test_parse_http_date_malformed(value: bytes | str) -> None:
    assert kind_of(lambda: parse_http_date(value)) == "date_malformed"


def test_format_http_date() -> None:
    assert format_http_date(SUNDAY) == b"Sun, 06 Nov 1994 08:49:37 GMT"
    assert format_http_date(SUNDAY + 0.99) == b"Sun, 06 Nov 1994 08:49:37 GMT"
    assert format_http_date(0) == b"Thu, 01 Jan 1970 00:00:00 GMT"


def test_parse_last_modified() -> None:
    value = b"Sun, 06 Nov 1994 08:49:37 GMT"
    assert parse_last_modified(None, SUNDAY) is None
    assert parse_last_modified(value, None) == SUNDAY  # no Date: nothing to compare with
    assert parse_last_modified(value, SUNDAY) == SUNDAY
    assert parse_last_modified(value, SUNDAY - 60) == SUNDAY  # within the default skew
    assert parse_last_modified(value, SUNDAY - 10, skew=10) == SUNDAY
    assert kind_of(lambda: parse_last_modified(value, SUNDAY - 61)) == "last_modified_future"
    assert kind_of(lambda: parse_last_modified(value, SUNDAY - 1, skew=0)) == "last_modified_future"
    assert kind_of(lambda: parse_last_modified(b"soon", SUNDAY)) == "date_malformed"


# ---- properties ----

etagc = st.characters(codec="latin-1", exclude_characters='"', min_codepoint=0x21).filter(lambda c: c != "\x7f")
entity_tags = st.builds(
    lambda weak, body: ETag(f'"{body}"', weak=weak),
    st.booleans(),
    st.text(etagc, max_size=MAX_ETAG_LENGTH - 4),
)
header_bytes = st.one_of(
    st.binary(max_size=300),
    # near misses: bytes made of the grammar's own pieces
    st.lists(st.sampled_from([b'"', b"W/", b"w/", b",", b" ", b"\t", b"a", b"\x00", b"\xe9"]), max_size=12).map(
        b"".join
    ),
)


@FAST
@given(st.lists(header_bytes, max_size=4))
def test_parse_etag_returns_an_etag_or_raises_invalid_header(values: list[bytes]) -> None:
    result, kind = attempt(lambda: parse_etag(values))
    if kind is not None:
        assert kind in {"etag_empty", "etag_duplicated", "etag_unquoted", "etag_oversized", "etag_malformed"}
    else:
        assert (result is None) == (not values)
        assert result is None or (isinstance(result, ETag) and len(result.header_value()) <= MAX_ETAG_LENGTH)


@FAST
@given(entity_tags, st.integers(min_value=1, max_value=3))
def test_valid_etags_round_trip(etag: ETag, copies: int) -> None:
    assert parse_etag([etag.header_value()] * copies) == etag
    assert parse_etag([b" " + etag.header_value() + b"\t"]) == etag
    assert ETag.from_json(etag.to_json()) == etag


@FAST
@given(st.one_of(st.binary(max_size=120), st.text(max_size=120), st.none()))
def test_parse_http_date_returns_a_finite_float_or_raises_invalid_header(value: bytes | str | None) -> None:
    result, kind = attempt(lambda: parse_http_date(value))
    assert kind in {None, "date_malformed"}
    if kind is None:
        assert (result is None) == (value is None)
        assert result is None or (isinstance(result, float) and math.isfinite(result) and 0 <= result <= LATEST)


@FAST
@given(
    st.sampled_from(["Mon", "Sunday", ""]),
    st.integers(1, 31),
    st.sampled_from(["Jan", "Feb", "Dec"]),
    st.integers(0, 10_050),
    st.text("0123456789:", max_size=10),
    st.sampled_from(["GMT", "+0000", "-2359", "+2400", "-0000", "EST", "XYZ", ""]),
)
def test_parse_http_date_on_date_like_text(
    weekday: str, day: int, month: str, year: int, clock: str, zone: str
) -> None:
    """Date-shaped junk reaches deep into the stdlib parser; it still only raises InvalidHeader."""
    result, kind = attempt(lambda: parse_http_date(f"{weekday}, {day:02d} {month} {year} {clock} {zone}"))
    assert kind in {None, "date_malformed"}
    if kind is None:
        assert isinstance(result, float)
        assert math.isfinite(result)
        assert 0 <= result <= LATEST


@FAST
@given(st.floats(min_value=0, max_value=LATEST + 0.999, allow_nan=False))
def test_format_http_date_round_trips(when: float) -> None:
    value = format_http_date(when)
    assert len(value) == 29
    assert parse_http_date(value) == int(when)


@FAST
@given(
    st.integers(0, 4_000_000_000),
    st.one_of(st.none(), st.integers(0, 4_000_000_000)),
    st.floats(min_value=0, max_value=86_400),
)
def test_last_modified_future_rule(modified: int, served: int | None, skew: float) -> None:
    value = format_http_date(modified)
    if served is not None and modified > served + skew:
        assert kind_of(lambda: parse_last_modified(value, served, skew=skew)) == "last_modified_future"
    else:
        assert parse_last_modified(value, served, skew=skew) == modified


def test_parse_retry_after() -> None:
    assert parse_retry_after(None, SUNDAY) is None
    assert parse_retry_after(b"120", SUNDAY) == 120.0
    assert parse_retry_after(" 0 ", SUNDAY) == 0.0
    assert parse_retry_after(format_http_date(SUNDAY + 90), SUNDAY) == 90.0
    assert parse_retry_after(format_http_date(SUNDAY - 90), SUNDAY) == 0.0  # a date past: no wait
    for junk in (b"-5", b"1.5", b"soon", b"", "\u0663"):  # Arabic-Indic three is a digit, not delay-seconds
        with pytest.raises(InvalidHeader) as info:
            parse_retry_after(junk, SUNDAY)
        assert info.value.kind == "retry_after_malformed"


@given(st.one_of(st.binary(max_size=80), st.text(max_size=80)))
@settings(max_examples=300, deadline=None)
def test_parse_retry_after_raises_only_invalid_header(value: bytes | str) -> None:
    try:
        seconds = parse_retry_after(value, SUNDAY)
    except InvalidHeader:
        return
    assert seconds is not None
    assert math.isfinite(seconds)
    assert seconds >= 0
