"""ConditionalRequestMiddleware: the downloader-side view of each visit.

It sits after HttpProxy (750) and before DownloaderStats (850). Today it settles
what never reached a download handler: a request refused by robots.txt or
offsite rules, answered by the HTTP cache or by another middleware, costs
nothing and releases its budget reservation at once (cached responses are
flagged, not counted as visits). Validators, 304s, bytes and host health join it
as they are built.

It also closes a hole in Scrapy's RobotsTxtMiddleware since it became a
coroutine (Scrapy 2.14, scrapy/scrapy#6802): requests that wait for a host's
robots.txt together all await one Deferred, and every waiter after the first gets
``None`` and goes out unchecked. A planned run starts many requests per host at
once, so disallowed pages were fetched. Once robots.txt is parsed, each request
is checked again here, after RobotsTxtMiddleware (100).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.exceptions import NotConfigured
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred

from scrapy_costsched.tracker import Tracker

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self


class ConditionalRequestMiddleware:
    """Settles every request's budget reservation, whether or not it was downloaded."""

    def __init__(self, crawler: Crawler, tracker: Tracker) -> None:
        self.crawler = crawler
        self.tracker = tracker
        self._robots: RobotsTxtMiddleware | None = None
        self._robots_found = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        tracker = Tracker.of(crawler)
        if not tracker.config.enabled:
            raise NotConfigured("COSTSCHED_ENABLED is False")
        return cls(crawler, tracker)

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        robots = self._robots_middleware()
        if robots is None or request.meta.get("dont_obey_robotstxt"):
            return
        parser = getattr(robots, "_parsers", {}).get(urlparse_cached(request).netloc)
        if parser is not None and not isinstance(parser, Deferred):
            robots.process_request_2(parser, request)  # raises IgnoreRequest for a disallowed URL

    def _robots_middleware(self) -> RobotsTxtMiddleware | None:
        """The crawl's RobotsTxtMiddleware if it has the coroutine version that lets waiters through."""
        if not self._robots_found:
            self._robots_found = True
            engine = self.crawler.engine
            middlewares = engine.downloader.middleware.middlewares if engine is not None else ()
            self._robots = next((mw for mw in middlewares if isinstance(mw, RobotsTxtMiddleware)
                                 and inspect.iscoroutinefunction(mw.process_request)), None)
        return self._robots

    def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        self.tracker.settle(request, response)
        return response

    def process_exception(self, request: Request, exception: Exception, spider: Spider | None = None) -> None:
        self.tracker.settle(request)
