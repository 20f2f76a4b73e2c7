"""ConditionalRequestMiddleware: the downloader-side view of each visit.

It sits after HttpProxy (750) and before DownloaderStats (850). Today it settles
what never reached a download handler: a request refused by robots.txt or
offsite rules, answered by the HTTP cache or by another middleware, costs
nothing and releases its budget reservation at once (cached responses are
flagged, not counted as visits). Validators, 304s, bytes and host health join it
as they are built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured

from scrapy_costsched.tracker import Tracker

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self


class ConditionalRequestMiddleware:
    """Settles every request's budget reservation, whether or not it was downloaded."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        tracker = Tracker.of(crawler)
        if not tracker.config.enabled:
            raise NotConfigured("COSTSCHED_ENABLED is False")
        return cls(tracker)

    def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        self.tracker.settle(request, response)
        return response

    def process_exception(self, request: Request, exception: Exception, spider: Spider | None = None) -> None:
        self.tracker.settle(request)
