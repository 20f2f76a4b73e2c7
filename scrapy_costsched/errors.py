"""One line, and no traceback, for a crawl the add-on refuses to start.

A bad ``COSTSCHED_*`` setting or an unusable state file is the user's to fix,
not a bug, and its message already says what to do. Scrapy, though, reports an
exception that stops a crawl at start-up with its traceback, and where depends
on the runner:

* ``AsyncCrawlerProcess`` (``scrapy crawl`` on Scrapy >= 2.14 with the asyncio
  reactor): asyncio's "Task exception was never retrieved";
* ``CrawlerProcess`` (Scrapy 2.13, or a reactor other than asyncio): the failed
  crawl's Deferred, which the command drops, is reported by Twisted as
  "Unhandled error in Deferred", once through Scrapy's log and once straight to
  stderr by Twisted's start-up observer, which Scrapy never retires. On 2.13 the
  engine's clean-up also chains an ``AttributeError`` onto the exception.

:func:`stop_crawl` logs the message once and drops those reports of that very
exception: log records carry it as ``exc_info``; under a Scrapy command on
Twisted, the crawl's Deferred gets an errback that takes the failure and the
command's exit code is set to 1 instead. The exception still propagates, so
Scrapy cleans up and fails the crawl (exit code 1), and a script driving a
``CrawlerRunner`` still receives it.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, NoReturn

from scrapy.commands import ScrapyCommand

if TYPE_CHECKING:
    from types import FrameType

    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

#: The loggers through which Scrapy's runners report an exception that stopped a crawl.
RUNNER_LOGGERS = ("asyncio", "twisted")

#: Marks a reported exception. An attribute, not a weak set: Twisted reports a Deferred
#: from its ``__del__``, after the garbage collector has cleared weak references to it.
_REPORTED = "_costsched_reported"


def _is_reported(exc: BaseException | None) -> bool:
    """Whether *exc*, or an exception it was raised from or while handling, was reported."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if getattr(exc, _REPORTED, False):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class _DropReported(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and _is_reported(record.exc_info[1]))


_filter = _DropReported()


def _take_reported(failure: Failure) -> Failure | None:
    return None if _is_reported(failure.value) else failure


def _command_and_crawl_deferred() -> tuple[ScrapyCommand | None, Deferred[object] | None]:
    """The Scrapy command running this crawl, and the Deferred of the outermost ``@inlineCallbacks`` call.

    That Deferred is the one the command receives: inner ones (``engine.open_spider`` on Scrapy
    2.13, ``Crawler.crawl`` under ``CrawlerRunner._crawl``) must still fail, for Scrapy to stop.
    """
    command: ScrapyCommand | None = None
    deferred: Deferred[object] | None = None
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "twisted.internet.defer" and frame.f_code.co_name == "_inlineCallbacks":
            deferred = getattr(frame.f_locals.get("status"), "deferred", None) or deferred
        if command is None and module.startswith("scrapy.commands"):
            candidate = frame.f_locals.get("self")
            command = candidate if isinstance(candidate, ScrapyCommand) else None
        frame = frame.f_back
    return command, deferred


def stop_crawl(exc: Exception) -> NoReturn:
    """Log *exc* as one CRITICAL line and raise it, so the crawl fails without its traceback."""
    logger.critical("%s", exc)
    setattr(exc, _REPORTED, True)
    for name in RUNNER_LOGGERS:
        runner_logger = logging.getLogger(name)
        if _filter not in runner_logger.filters:
            runner_logger.addFilter(_filter)
    command, deferred = _command_and_crawl_deferred()
    if command is not None and deferred is not None:
        # The command drops the crawl's Deferred; it would be reported when garbage-collected.
        deferred.addErrback(_take_reported)
        command.exitcode = 1
    raise exc
