"""ConditionalRequestMiddleware: the downloader-side view of each visit.

It sits after HttpProxy (750) and before DownloaderStats (850), so Scrapy's own
stats see real 304s. On a visit of a known page whose host earned trust for a
validator (:mod:`~.model.validators`), it sends the stored ETag as
``If-None-Match`` and/or the stored Last-Modified as ``If-Modified-Since``:
never on a first visit, on a request that carries conditional headers of its
own, or on a verification visit. The headers it added are marked in meta
(``costsched_validators``) and stripped from a redirected request: validators
belong to the URL that answered. A conditional request skips an HTTP cache
that stores any answer (``dont_cache``), whose copy of a 304 would be an empty page.

A 304 to its validators is the visit's observation, "unchanged since the last
visit", and reaches neither the callback nor the errback (HttpErrorMiddleware
does not see it as an error) unless the spider asks for its 304s
(``COSTSCHED_DELIVER_NOT_MODIFIED`` or meta ``costsched_deliver_not_modified``).
Every ``k``-th conditional visit of a host is a verification: it sends a canary
validator no response ever carried, which an honest host answers in full and a
host that answers 304 to anything answers 304 (then the page is fetched again at
once, without validators).

A request for a host under a Retry-After pause (:mod:`~.slots`, set by the
tracker as the 429 or 503 arrives) that reaches a download slot holds the slot
until the pause ends. RetryMiddleware's retries come back through the
scheduler, which keeps them out of the downloader until then. With
``COSTSCHED_MAXSIZE`` it sets ``download_maxsize`` by page type.

It also settles what never reached a download handler: a request refused by
robots.txt or offsite rules, answered by the HTTP cache or by another
middleware, costs nothing and releases its budget reservation at once (cached
responses are flagged, not counted as visits).

And it closes a hole in Scrapy's RobotsTxtMiddleware since it became a
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
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.extensions.httpcache import RFC2616Policy
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object
from twisted.internet.defer import Deferred

from scrapy_costsched.slots import HostPaused
from scrapy_costsched.tracker import Tracker
from scrapy_costsched.visits import (
    DELIVER_META,
    NOT_MODIFIED_META,
    PAGE_META,
    REFETCH_META,
    REFUSED_META,
    SUBREQUEST_META,
    VALIDATORS_META,
    AttemptRefused,
    same_resource,
)

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self


#: Headers that make a request conditional: a request that has one of its own is left as it is.
CONDITIONAL_HEADERS = (b"If-None-Match", b"If-Modified-Since", b"If-Match", b"If-Unmodified-Since", b"If-Range")


def _discard(response: Response, **kwargs: Any) -> Iterable[Any]:
    """The callback of a 304 already observed: nothing for the spider."""
    return ()


class ConditionalRequestMiddleware:
    """Sends the validators a host earned, turns 304s into observations, and settles every reservation."""

    def __init__(self, crawler: Crawler, tracker: Tracker) -> None:
        self.crawler = crawler
        self.tracker = tracker
        self._robots: RobotsTxtMiddleware | None = None
        self._robots_found = False
        # A conditional request goes past an HTTP cache (900) whose policy stores any answer (DummyPolicy): it
        # would keep the 304, an empty page, as the page's copy. RFC2616Policy never stores a 304.
        settings = crawler.settings
        self._cache_keeps_304s = settings.getbool("HTTPCACHE_ENABLED") and not issubclass(
            load_object(settings["HTTPCACHE_POLICY"]), RFC2616Policy)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        tracker = Tracker.of(crawler)
        if not tracker.config.enabled:
            raise NotConfigured("COSTSCHED_ENABLED is False")
        return cls(crawler, tracker)

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        refused = request.meta.get(REFUSED_META)
        if refused is not None:
            raise AttemptRefused(f"{request.url}: not sent, {refused}")
        self._check_robots(request)
        blocked = self.tracker.health.blocked_for(request)
        if blocked > self.tracker.config.block_wait:
            raise HostPaused(f"{request.url}: its host is paused for {blocked:.0f} s more")
        if blocked > 0:  # a request that reaches a slot nobody held, e.g. one created since the pause began
            self.tracker.health.hold_slot(request, blocked)
        refusal = self.tracker.admit_media(request)
        if refusal is not None:
            raise IgnoreRequest(f"{request.url}: not downloaded, {refusal}")
        self._add_validators(request)
        if self.tracker.config.max_sizes and "download_maxsize" not in request.meta:
            page = self.tracker.page(request.meta.get(PAGE_META) or "")
            if page is not None and page.page_type in self.tracker.config.max_sizes:
                request.meta["download_maxsize"] = self.tracker.config.max_sizes[page.page_type]


    def _check_robots(self, request: Request) -> None:
        robots = self._robots_middleware()
        if robots is None or request.meta.get("dont_obey_robotstxt"):
            return
        parser = getattr(robots, "_parsers", {}).get(urlparse_cached(request).netloc)
        if parser is not None and not isinstance(parser, Deferred):
            robots.process_request_2(parser, request)  # raises IgnoreRequest for a disallowed URL

    def _add_validators(self, request: Request) -> None:
        meta = request.meta
        added = meta.get(VALIDATORS_META)
        if isinstance(added, dict):
            if added.get("url") == request.url:  # a retry of the conditional request
                return
            for name in added.get("headers") or ():  # a redirect: the validators were the old URL's
                request.headers.pop(name, None)
            del meta[VALIDATORS_META]
            self.tracker.stats.inc_value("costsched/conditional/stripped")
        if PAGE_META not in meta or meta.get(SUBREQUEST_META) or meta.get(REFETCH_META):
            return
        if any(name in request.headers for name in CONDITIONAL_HEADERS):  # the spider's own: left alone
            return
        validators = self.tracker.validators_for(request)
        if validators is not None:
            headers, canary = validators
            for name, value in headers.items():
                request.headers[name] = value
            meta[VALIDATORS_META] = {"url": request.url, "headers": headers, "canary": canary}
            if self._cache_keeps_304s:
                meta["dont_cache"] = True
            self.tracker.stats.inc_value(f"costsched/conditional/{'canary' if canary else 'sent'}")

    def _robots_middleware(self) -> RobotsTxtMiddleware | None:
        """The crawl's RobotsTxtMiddleware if it has the coroutine version that lets waiters through."""
        if not self._robots_found:
            self._robots_found = True
            engine = self.crawler.engine
            middlewares = engine.downloader.middleware.middlewares if engine is not None else ()
            self._robots = next((mw for mw in middlewares if isinstance(mw, RobotsTxtMiddleware)
                                 and inspect.iscoroutinefunction(mw.process_request)), None)
        return self._robots

    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Request | Response:
        self.tracker.settle(request, response)
        added = request.meta.get(VALIDATORS_META)
        if response.status != 304 or "cached" in response.flags or not isinstance(added, dict) \
                or not same_resource(added.get("url") or "", response.url):
            return response
        if self.tracker.not_modified(request, response):
            return self._refetch(request, added.get("headers") or {})
        meta = {**request.meta, NOT_MODIFIED_META: True}
        if request.meta.get(DELIVER_META, self.tracker.config.deliver_not_modified):
            meta["handle_httpstatus_list"] = [*meta.get("handle_httpstatus_list", ()), 304]
            return response.replace(request=request.replace(meta=meta), flags=[*response.flags, "not_modified"])
        meta["handle_httpstatus_all"] = True
        return response.replace(request=request.replace(callback=_discard, errback=None, meta=meta))

    def _refetch(self, request: Request, added: dict[str, str]) -> Request:
        """The page again at once, without validators: a 304 to a canary says nothing about it."""
        refetch = request.replace(dont_filter=True)
        for name in added:
            refetch.headers.pop(name, None)
        del refetch.meta[VALIDATORS_META]
        refetch.meta[REFETCH_META] = True
        return refetch

    def process_exception(self, request: Request, exception: Exception, spider: Spider | None = None) -> None:
        self.tracker.settle(request, exception=exception)
        if self.tracker.media_cut(request, exception):  # told apart from a failure: the media pipeline logs none
            raise IgnoreRequest(f"{request.url}: not downloaded, larger than what the period's budget has left")
