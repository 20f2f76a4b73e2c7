"""Ties what a callback produces to the visit whose response it parsed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.exceptions import NotConfigured

from scrapy_costsched.sessions import SESSION_META
from scrapy_costsched.tracker import Tracker
from scrapy_costsched.visits import PAGE_META, Visit

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self


class CostSchedSpiderMiddleware:
    """Ties items and requests to their visit, and closes the visit's record when the output is exhausted.

    It must run before ``HttpErrorMiddleware`` (order 50), so it sees 404/410
    (gone) and failed responses too; the add-on puts it at 45. A request the
    callback yields with the page's ``costsched_page`` meta (for example with
    ``meta=response.meta``) is a chained sub-request of the same visit: it is
    marked ``costsched_subrequest``, items it yields still belong to the page, and
    the record waits for it.
    """

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self._visits: dict[int, Visit] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        tracker = Tracker.of(crawler)
        if not tracker.config.enabled:
            raise NotConfigured("COSTSCHED_ENABLED is False")
        return cls(tracker)

    def process_spider_input(self, response: Response, spider: Spider | None = None) -> None:
        visit = self.tracker.open_visit(response)
        if visit is not None:
            self._visits[id(response)] = visit

    def _visit(self, response: Response) -> Visit | None:
        return self._visits.pop(id(response), None)

    def _note(self, visit: Visit, response: Response, output: Any) -> None:
        if isinstance(output, Request):
            if output.meta.get(SESSION_META):  # neither a link to a page nor part of this visit
                self.tracker.session_from(response)
            elif output.meta.get(PAGE_META) == visit.page_key:
                self.tracker.add_subrequest(visit, output)
            else:
                self.tracker.add_outlink(visit, output)
        else:
            self.tracker.item_emitted(visit, response, output)

    def process_spider_output(self, response: Response, result: Iterable[Any],
                              spider: Spider | None = None) -> Iterator[Any]:
        visit = self._visit(response)
        if visit is None:
            yield from result
            return
        for output in result:
            self._note(visit, response, output)
            yield output
        self.tracker.output_done(visit)

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any],
                                          spider: Spider | None = None) -> AsyncIterator[Any]:
        visit = self._visit(response)
        if visit is None:
            async for output in result:
                yield output
            return
        async for output in result:
            self._note(visit, response, output)
            yield output
        self.tracker.output_done(visit)

    def process_spider_exception(self, response: Response, exception: Exception,
                                 spider: Spider | None = None) -> None:
        visit = self._visit(response)
        if visit is not None:
            self.tracker.note_failure(visit.page_key, exception)
            self.tracker.output_done(visit, failed=True)
