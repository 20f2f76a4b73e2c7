"""Parse the validators a conditional request sends back: ETag and HTTP dates.

Pure (no Scrapy, no I/O). Servers send every kind of broken header, so each parser returns a value,
``None`` when the header is absent, or raises :class:`InvalidHeader`, and nothing else; the caller
counts ``costsched/invalid/<kind>``.

>>> parse_etag([b' W/"abc" '])
ETag(opaque='"abc"', weak=True)
>>> parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT")
784111777.0
>>> format_http_date(784111777.0)
b'Sun, 06 Nov 1994 08:49:37 GMT'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timezone
from email.utils import formatdate, parsedate_to_datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

MAX_ETAG_LENGTH = 256  # bytes, quotes and W/ included; longer is "etag_oversized"
MAX_DATE_LENGTH = 100  # characters; a longer "date" is junk, not worth parsing
_MAX_TIMESTAMP = 253402300799.0  # 9999-12-31 23:59:59 UTC

# RFC 9110 8.8.3: entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE; etagc = %x21 / %x23-7E / obs-text.
# No escapes: a backslash is an ordinary etagc. Bytes are decoded as latin-1, so obs-text is \x80-\xff.
_OPAQUE = r'"[\x21\x23-\x7e\x80-\xff]*"'
_OPAQUE_TAG = re.compile(_OPAQUE)
_ENTITY_TAG = re.compile(f"(W/)?({_OPAQUE})")
_OWS = " \t"


class InvalidHeader(ValueError):
    """A header that is present but unusable; *kind* names the stat (costsched/invalid/<kind>)."""

    kind: str

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ETag:
    """One entity-tag; construction checks the grammar, so every instance can be sent back."""

    opaque: str  # the quoted opaque tag including its double quotes, e.g. '"abc"'
    weak: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.opaque, str) or not _OPAQUE_TAG.fullmatch(self.opaque):
            raise InvalidHeader("etag_malformed", f"not a quoted opaque tag: {_show(self.opaque)}")
        if len(self.opaque) + 2 * self.weak > MAX_ETAG_LENGTH:
            raise InvalidHeader("etag_oversized", f"ETag longer than {MAX_ETAG_LENGTH} bytes")

    def header_value(self) -> bytes:
        """What If-None-Match sends: ``b'W/"abc"'`` or ``b'"abc"'``."""
        return self.to_json().encode("latin-1")

    def weak_match(self, other: ETag) -> bool:
        """RFC 9110 8.8.3.2 weak comparison, the one If-None-Match uses: the opaque tags are equal."""
        return self.opaque == other.opaque

    def to_json(self) -> str:
        return ("W/" if self.weak else "") + self.opaque

    @classmethod
    def from_json(cls, data: object) -> ETag:
        """Parse :meth:`to_json` back; stored state is trusted no more than a server."""
        match = _ENTITY_TAG.fullmatch(data) if isinstance(data, str) and len(data) <= MAX_ETAG_LENGTH else None
        if match is None:
            raise InvalidHeader("etag_malformed", f"not a stored ETag: {_show(data)}")
        return cls(match[2], weak=match[1] is not None)


def parse_etag(values: Sequence[bytes]) -> ETag | None:
    """The ETag of a response from all its ETag header values (Scrapy's headers.getlist(b"ETag")).

    Repeated values, separate or comma-joined (as a proxy may join them), are accepted when all
    equal; different tags make the validator ambiguous, so they are "etag_duplicated".
    """
    if not values:
        return None
    texts = [value.decode("latin-1").strip(_OWS) for value in values]
    longest = max(texts, key=len)
    if len(longest) > MAX_ETAG_LENGTH:  # before any scanning: a hostile megabyte is not parsed
        raise InvalidHeader("etag_oversized", f"ETag longer than {MAX_ETAG_LENGTH} bytes: {_show(longest)}")
    tags = {tag for text in texts for tag in _split_list(text)}
    if len(tags) > 1:
        raise InvalidHeader("etag_duplicated", f"several ETags: {_show(sorted(tags))}")
    (tag,) = tags
    match = _ENTITY_TAG.fullmatch(tag)
    if match is not None:
        return ETag(match[2], weak=match[1] is not None)
    if not tag:
        raise InvalidHeader("etag_empty", "empty ETag")
    if '"' not in tag:
        raise InvalidHeader("etag_unquoted", f"unquoted ETag: {_show(tag)}")
    raise InvalidHeader("etag_malformed", f"malformed ETag: {_show(tag)}")


def _split_list(text: str) -> list[str]:
    """Split on the commas outside double quotes: '"a,b"' is one tag, '"a", "b"' two."""
    items, start, quoted = [], 0, False
    for i, char in enumerate(text):
        if char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            items.append(text[start:i].strip(_OWS))
            start = i + 1
    items.append(text[start:].strip(_OWS))
    return items


def parse_http_date(value: bytes | str | None) -> float | None:
    """Epoch seconds of an HTTP-date; None when absent. InvalidHeader("date_malformed") otherwise.

    Accepts RFC 9110 5.6.7's IMF-fixdate, RFC 850 and asctime forms, and whatever else
    email.utils.parsedate_to_datetime reads (numeric zones); a date without a usable zone is GMT.
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if len(text) > MAX_DATE_LENGTH or not text.strip():
        raise InvalidHeader("date_malformed", f"not an HTTP date: {_show(text)}")
    try:
        parsed = parsedate_to_datetime(text)
        if parsed.tzinfo is None:  # asctime, "-0000" and unknown zones; .timestamp() would use local time
            parsed = parsed.replace(tzinfo=timezone.utc)
        when = parsed.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        # ValueError for junk and out-of-range fields or zones (+9999), OverflowError for huge zone digits;
        # TypeError and IndexError were raised by older Pythons' email.utils for some junk.
        raise InvalidHeader("date_malformed", f"not an HTTP date: {_show(text)}") from None
    if not (math.isfinite(when) and 0.0 <= when <= _MAX_TIMESTAMP):
        raise InvalidHeader("date_malformed", f"HTTP date out of range (1970 to 9999): {_show(text)}")
    return when


def format_http_date(when: float) -> bytes:
    """IMF-fixdate of epoch seconds, fraction dropped, in English whatever the locale."""
    return formatdate(when, usegmt=True).encode("ascii")


def parse_last_modified(value: bytes | None, served: float | None, *, skew: float = 60.0) -> float | None:
    """Last-Modified as epoch seconds; InvalidHeader("last_modified_future") when later than the
    response's own Date (*served*, epoch seconds, if known) by more than *skew* seconds;
    date_malformed as parse_http_date.
    """
    when = parse_http_date(value)
    if when is not None and served is not None and when > served + skew:
        raise InvalidHeader("last_modified_future", f"Last-Modified {when - served:.0f} s after the response's Date")
    return when


def _show(value: object) -> str:
    """A hostile value's repr, cut short for logs."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_retry_after(value: bytes | str | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` asks to wait from *now* (epoch seconds: the server's ``Date``, as clocks
    differ, else the local clock); None when absent.

    RFC 9110 section 10.2.3: delay-seconds (a non-negative integer) or an HTTP-date; a date
    in the past means no wait (0). InvalidHeader("retry_after_malformed") otherwise. The
    caller caps absurd values.
    """
    if value is None:
        return None
    text = (value.decode("latin-1") if isinstance(value, bytes) else value).strip()
    if text.isdigit() and text.isascii():
        return float(int(text[:12]))  # 12 digits are 30,000 years: capped by the caller either way
    try:
        when = parse_http_date(text)
    except InvalidHeader:
        raise InvalidHeader("retry_after_malformed", f"not delay-seconds or an HTTP date: {_show(text)}") from None
    assert when is not None
    return max(when - now, 0.0)
