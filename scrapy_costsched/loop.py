"""The loop that runs the crawl: a Twisted reactor, or asyncio's loop alone.

Scrapy 2.15 and later can crawl without a reactor (``TWISTED_REACTOR_ENABLED = False``); it then
forbids importing ``twisted.internet.reactor``, which Twisted's thread and timer helpers do. Planning and
the refit at close run in a worker thread and the progress line runs on a timer either way: through the
reactor when there is one, through asyncio's default executor and :mod:`scrapy.utils.asyncio`'s looping
call when there is not. Components driven by hand, with neither running, do their work in place.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThread

if TYPE_CHECKING:
    from collections.abc import Callable

_T = TypeVar("_T")

__all__ = ["Ticker", "in_thread", "running_loop"]


def running_loop() -> Literal["reactor", "asyncio"] | None:
    """What runs this crawl: a running reactor, asyncio's loop without one, or nothing (driven by hand)."""
    try:
        from twisted.internet import reactor  # here: importing it installs one, and Scrapy picks which
    except ImportError:  # TWISTED_REACTOR_ENABLED = False: Scrapy forbids installing one
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None
        return "asyncio"
    return "reactor" if reactor.running else None


def in_thread(work: Callable[[], _T]) -> Deferred[_T]:
    """Run *work* in a worker thread of the crawl's loop (which must be running); its result as a Deferred,
    which Scrapy's engine awaits whatever the loop."""
    if running_loop() == "asyncio":
        return Deferred.fromFuture(asyncio.get_running_loop().run_in_executor(None, work))
    return deferToThread(work)


class Ticker:
    """Calls a function every *interval* seconds on the crawl's loop, from the first interval's end."""

    def __init__(self, tick: Callable[[], object], interval: float) -> None:
        if running_loop() == "asyncio":
            from scrapy.utils.asyncio import AsyncioLoopingCall  # Scrapy 2.14+; crawls without a reactor, 2.15+

            self._call: AsyncioLoopingCall | LoopingCall = AsyncioLoopingCall(tick)
        else:
            self._call = LoopingCall(tick)
        self._call.start(interval, now=False)

    def stop(self) -> None:
        if self._call.running:
            self._call.stop()
