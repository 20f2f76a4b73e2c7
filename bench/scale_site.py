"""A generated site of N small pages on 127.0.0.1, fast enough not to be what a scale bench measures.

Pages are ``/p/<i>`` (one product's fields and :data:`LINKS` links to other pages),
an index ``/`` and ``/robots.txt``. Everything is a pure function of the page number,
so the bench can seed a crawl state that agrees with what the crawl will see. The
server is a bare asyncio protocol (keep-alive HTTP/1.1, GET and HEAD only) meant to
run in its own process, so it does not share the crawler's GIL. With ``--latency`` each answer
waits that long before it is written, as a server across a network would keep it:

    python bench/scale_site.py --pages 200000     # prints "SITE http://127.0.0.1:<port>"
    python bench/scale_site.py --latency 0.05     # each answer 50 ms after its request
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from typing import NamedTuple

#: Links from each page to other pages (what a spider follows, and the scheduler must sort).
LINKS = 3
#: Pages the index links to.
INDEX_LINKS = 20
ROBOTS_TXT = b"User-agent: *\nAllow: /\n"
#: A request head larger than this is refused (the loopback clients send a few hundred bytes).
MAX_HEAD = 16384
TIERS = ("critical", "high", "high", "normal", "normal", "normal", "normal", "low", "low", "low")
_ADJECTIVES = ("Sturdy", "Compact", "Classic", "Deluxe", "Eco", "Smart", "Rustic", "Nimble")
_NOUNS = ("Kettle", "Lamp", "Drill", "Blender", "Backpack", "Speaker", "Notebook", "Chair")


class Page(NamedTuple):
    """What page *number* shows."""

    number: int
    name: str
    price: str
    tier: str
    links: tuple[int, ...]


def _mix(i: int) -> int:
    """A cheap, stable 32-bit scramble of *i* (Knuth's multiplicative hash)."""
    return (i * 2654435761) & 0xFFFFFFFF


def page(i: int, pages: int) -> Page:
    """Page *i* of a site of *pages* pages."""
    h = _mix(i)
    links = tuple((i + 1 + _mix(i * LINKS + k) % (pages - 1)) % pages for k in range(LINKS)) if pages > 1 else ()
    return Page(i, f"{_ADJECTIVES[h % 8]} {_NOUNS[(h >> 3) % 8]} {i}", f"{(h >> 6) % 100000 / 100:.2f}",
                TIERS[(h >> 23) % len(TIERS)], links)


def item(url: str, p: Page) -> dict[str, object]:
    """The item the bench spider extracts from page *p* at *url*."""
    return {"url": url, "number": p.number, "name": p.name, "price": p.price}


def _link(j: int, pages: int) -> str:
    """A link to page *j*, with its value tier (as a listing shows a badge)."""
    return f'<li><a class="page" href="/p/{j}" data-tier="{page(j, pages).tier}">page {j}</a></li>'


def render(path: str, pages: int) -> tuple[int, bytes, bytes]:
    """Status, content type and body of *path*."""
    if path == "/robots.txt":
        return 200, b"text/plain", ROBOTS_TXT
    if path == "/":
        rows = "".join(_link(i, pages) for i in range(min(INDEX_LINKS, pages)))
        return 200, b"text/html; charset=utf-8", f"<!DOCTYPE html><html><body><ul>{rows}</ul></body></html>".encode()
    number = path.removeprefix("/p/")
    if path.startswith("/p/") and number.isdigit() and int(number) < pages:
        p = page(int(number), pages)
        links = "".join(_link(j, pages) for j in p.links)
        body = (f'<!DOCTYPE html><html><head><title>{p.name}</title></head><body><h1 class="name">{p.name}</h1>'
                f'<p>Price: <span class="price">{p.price}</span></p><p class="tier">{p.tier}</p>'
                f"<ul>{links}</ul></body></html>")
        return 200, b"text/html; charset=utf-8", body.encode()
    return 404, b"text/html; charset=utf-8", b"<!DOCTYPE html><html><body><h1>Not found</h1></body></html>"


class _Http(asyncio.Protocol):
    """Keep-alive HTTP/1.1 over one connection: one response per request head, in order."""

    def __init__(self, pages: int, latency: float = 0.0) -> None:
        self.pages = pages
        self.latency = latency
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head, self.buffer = self.buffer[:end], self.buffer[end + 4:]
            lines = head.split(b"\r\n")
            parts = lines[0].split(b" ")
            if len(parts) != 3 or parts[0] not in (b"GET", b"HEAD"):
                self.transport.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                self.transport.close()
                return
            status, content_type, body = render(parts[1].decode("latin-1").split("?", 1)[0], self.pages)
            close = any(line.lower().replace(b" ", b"") == b"connection:close" for line in lines[1:])
            answer = (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s"
                      % (status, b"OK" if status == 200 else b"Not Found", content_type, len(body),
                         b"Connection: close\r\n" if close else b"", body if parts[0] == b"GET" else b""))
            if self.latency > 0.0:
                # Answers of one connection keep their order: each waits as long, from a later request.
                asyncio.get_running_loop().call_later(self.latency, self._answer, answer, close)
            else:
                self._answer(answer, close)
            if close:
                return
        if len(self.buffer) > MAX_HEAD:
            self.transport.close()

    def _answer(self, answer: bytes, close: bool) -> None:
        assert self.transport is not None
        if self.transport.is_closing():  # the client went away while the answer waited
            return
        self.transport.write(answer)
        if close:
            self.transport.close()


async def serve(pages: int, port: int = 0, latency: float = 0.0) -> None:
    """Serve until SIGTERM or until the process that started this one is gone."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Http(pages, latency), "127.0.0.1", port)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    parent = os.getppid()
    print(f"SITE http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        while not stop.is_set() and os.getppid() == parent:  # an orphaned server stops within a second
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=200_000)
    parser.add_argument("--port", type=int, default=0, help="0 (default) picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each answer waits (default 0)")
    args = parser.parse_args()
    if not 0.0 <= args.latency <= 10.0:
        parser.error("--latency must be between 0 and 10 seconds")
    asyncio.run(serve(args.pages, args.port, args.latency))


if __name__ == "__main__":
    main()
