"""Bytes from the wire: what one download attempt moved, headers included, body as transferred.

Measured where the downloader hands the response over (before HttpCompressionMiddleware
inflates the body), so a compressed page counts its compressed size. The response counts its
status line, one ``Name: value`` line per header value and the body: what the server wrote for a
response sent with ``Content-Length``, and exactly what Scrapy's ``DownloaderStats`` counts. The
request counts what ``DownloaderStats`` counts (:func:`scrapy.utils.request.request_httprepr`)
plus the ``:port`` the HTTP client writes into the ``Host`` header for a non-default port, which
that representation leaves out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.httpcompression import ACCEPTED_ENCODINGS
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.request import request_httprepr
from twisted.web.http import RESPONSES

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

_CRLF = 2


_DEFAULT_PORTS = {"http": 80, "https": 443}


def request_size(request: Request) -> int:
    url = urlparse_cached(request)
    port = url.port
    explicit_port = len(f":{port}") if port is not None and port != _DEFAULT_PORTS.get(url.scheme) else 0
    return len(request_httprepr(request)) + explicit_port


def response_size(response: Response) -> int:
    """Status line, header lines, the blank line and the body as received."""
    status_line = len(b"HTTP/1.1 000 ") + len(RESPONSES.get(response.status, b"")) + _CRLF
    headers = sum(len(name) + 2 + len(value) + _CRLF for name, values in response.headers.items() for value in values)
    return status_line + headers + _CRLF + len(response.body)


def compression_gaps(settings: BaseSettings) -> list[str]:
    """What keeps responses bigger than they need be: HttpCompressionMiddleware off, or Brotli or Zstandard
    not offered to servers.

    Scrapy's own list of the encodings it offers decides: Scrapy 2.19 depends on both decoders and offers
    them always, older versions only when ``brotli`` (or ``brotlicffi``) and ``zstandard`` import.
    """
    if not settings.getbool("COMPRESSION_ENABLED"):
        return ["COMPRESSION_ENABLED is False, so responses come uncompressed"]
    missing = [name for name, encoding in (("Brotli", b"br"), ("Zstandard", b"zstd"))
               if encoding not in ACCEPTED_ENCODINGS]
    if not missing:
        return []
    offered = ", ".join(encoding.decode("ascii") for encoding in ACCEPTED_ENCODINGS)
    return [(f"servers are not offered {' and '.join(missing)} (only {offered}): "
            "pip install scrapy-costsched[bandwidth] installs the decoders Scrapy needs")]
