"""Holding a download slot: Retry-After enforced where requests leave.

Requests already queued in a download slot have passed the scheduler and the downloader
middlewares, so neither can stop them. Scrapy's downloader sends nothing from a slot while
the slot's ``latercall`` (its download-delay timer) is pending, so a hold is such a timer
that ends with the pause; from then on the slot's delay and concurrency apply as before
(Scrapy 2.13 to 2.19). The hold is set when ``response_downloaded`` fires, which Scrapy
sends before it frees the slot for the next queued request.

A pause longer than the run waits (``COSTSCHED_BLOCK_WAIT``) would keep the requests queued
in the slot, and the crawl, waiting: they are taken out of the slot with :exc:`HostPaused`
(an ``IgnoreRequest``), their budget goes back to the period, and their pages are planned
again in a later run.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest

try:
    from scrapy.utils.asyncio import call_later
except ImportError:  # Scrapy < 2.14: the downloader's timers are the reactor's
    call_later = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

__all__ = ["HostPaused", "SlotHolds"]


class HostPaused(IgnoreRequest):
    """Not sent in this run: its host is paused longer than the run waits (it asked with Retry-After, or it is taken
    for down)."""


class SlotHolds:
    """The download slots this crawl holds for a host's pause, and until when (epoch seconds)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._held: dict[str, tuple[Any, float]] = {}  # slot key -> the slot held, and until when

    def hold(self, request: Request, seconds: float, *, release_queued: bool = False) -> bool:
        """Send nothing from *request*'s download slot for *seconds*; ``False`` if it is held that long already.

        With *release_queued*, the requests waiting in the slot leave it with :exc:`HostPaused`.
        """
        engine = self.crawler.engine
        downloader = engine.downloader if engine is not None else None
        key = request.meta.get("download_slot")
        slot = downloader.slots.get(key) if downloader is not None and isinstance(key, str) else None
        if slot is None:
            return False
        assert isinstance(key, str)
        if release_queued:
            while slot.queue:
                queued, waiting = slot.queue.popleft()
                waiting.errback(HostPaused(f"{queued.url}: its host is paused for {seconds:.0f} s"))
        until = time.time() + seconds
        held = self._held.get(key)
        if held is not None and held[0] is slot and held[1] >= until - 0.5:
            return False
        pending = slot.latercall
        if pending is not None and (not hasattr(pending, "active") or pending.active()):
            pending.cancel()
        if call_later is not None:  # Scrapy 2.14+: the timer's callback clears it, then sends what waits
            slot.latercall = call_later(seconds, downloader._latercall, slot)
        else:
            from twisted.internet import reactor

            slot.latercall = reactor.callLater(seconds, downloader._process_queue, self.crawler.spider, slot)
        self._held[key] = (slot, until)
        return True
