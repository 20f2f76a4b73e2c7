"""The spider of ``bench/crawl_scale.py``, run with ``scrapy runspider`` against ``bench/scale_site.py``.

The same code crawls with the add-on and as plain Scrapy, so the two runs differ only
in the scheduler. Pages yield one item and follow every link, as a user's spider
would. With the add-on the crawl starts from the index and the scheduler decides
what goes out. As plain Scrapy it starts from the URLs the add-on run visited
(``-a urls_file=...``), and :class:`ListedOnlyDupeFilter` drops every other link at
the scheduler, where the add-on drops the pages it did not plan: the same requests
are yielded and the same ones reach the site.

At close it writes the URLs it parsed (``-a visited=...``) and the crawl's stats with
the times of opening, of the first request and of closing (``-s BENCH_STATS_FILE=...``),
as epoch seconds the driver compares with its own clock.
"""

from __future__ import annotations

import gc
import json
import resource
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scrapy
from scrapy import signals
from scrapy.dupefilters import RFPDupeFilter

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

PAGE_TYPE = "page"


def peak_rss() -> float:
    """This process's peak resident set since it exec'd, in bytes.

    Linux's ``VmHWM``, not ``ru_maxrss``: a spawned child's ``ru_maxrss`` starts at
    the resident size of the parent it was forked from.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(usage if sys.platform == "darwin" else usage * 1024)


class GcClock:
    """Wall time the cyclic garbage collector takes, per generation: it grows with every object a crawl keeps."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._started = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._started
            self.collections[info["generation"]] += 1


class ListedOnlyDupeFilter(RFPDupeFilter):
    """Scrapy's duplicate filter that also drops every URL not in ``BENCH_URLS_FILE``.

    Every request still goes through Scrapy's filter first, as in a plain crawl of the site:
    each link the spider yields is fingerprinted and remembered, listed or not.
    """

    listed: frozenset[str] = frozenset()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        dupefilter = super().from_crawler(crawler)
        dupefilter.listed = frozenset(Path(crawler.settings["BENCH_URLS_FILE"]).read_text(encoding="utf-8").split())
        return dupefilter

    def request_seen(self, request: scrapy.Request) -> bool:
        return super().request_seen(request) or request.url not in self.listed


class ScaleSpider(scrapy.Spider):
    """Pages yield one item and follow their links; the index only leads to pages."""

    name = "scale"
    custom_settings = {
        "ADDONS": {"scrapy_costsched.Addon": 0},
        "ROBOTSTXT_OBEY": True,
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": 16,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
        "DOWNLOAD_DELAY": 0,
        "TELNETCONSOLE_ENABLED": False,
        "REMOTE_CONTROL_ENABLED": False,
    }

    def __init__(self, site: str = "", urls_file: str | None = None, visited: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not site:
            raise ValueError("the scale spider needs -a site=URL")
        self.site = site.rstrip("/")
        self.urls = Path(urls_file).read_text(encoding="utf-8").split() if urls_file else None
        self.visited_file = visited
        self.visited: list[str] = []
        self.times: dict[str, float] = {}
        self.gc = GcClock()

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider._opened, signal=signals.spider_opened)
        crawler.signals.connect(spider._reached, signal=signals.request_reached_downloader)
        return spider

    def _opened(self) -> None:
        self.times["opened"] = time.time()

    def _reached(self, request: scrapy.Request) -> None:
        self.times.setdefault("first_request", time.time())

    async def start(self) -> AsyncIterator[Any]:
        if self.urls is None:
            yield scrapy.Request(f"{self.site}/", callback=self.parse)
            return
        for url in self.urls:
            callback = self.parse_page if "/p/" in url else self.parse
            yield scrapy.Request(url, callback=callback, meta=self.meta_for(None) if "/p/" in url else {})

    @staticmethod
    def meta_for(tier: str | None) -> dict[str, Any]:
        return {"costsched_page_type": PAGE_TYPE, "costsched_value": tier or "normal"}

    def _follow(self, response: Response) -> Iterator[scrapy.Request]:
        for link in response.css("a.page"):
            yield response.follow(link.attrib["href"], callback=self.parse_page,
                                  meta=self.meta_for(link.attrib.get("data-tier")))

    def parse(self, response: Response, **kwargs: Any) -> Iterator[scrapy.Request]:
        self.visited.append(response.url)
        yield from self._follow(response)

    def parse_page(self, response: Response) -> Iterator[Any]:
        self.visited.append(response.url)
        yield {
            "url": response.url,
            "number": int(response.url.rsplit("/", 1)[1]),
            "name": response.css("h1.name::text").get(),
            "price": response.css("span.price::text").get(),
        }
        yield from self._follow(response)

    def closed(self, reason: str) -> None:
        self.times["closed"] = time.time()
        self.times["peak_rss"] = peak_rss()
        for generation in range(3):
            self.times[f"gc{generation}_seconds"] = self.gc.seconds[generation]
            self.times[f"gc{generation}_collections"] = self.gc.collections[generation]
        if self.visited_file:
            Path(self.visited_file).write_text("".join(f"{url}\n" for url in self.visited), encoding="utf-8")
        stats_file = self.settings.get("BENCH_STATS_FILE")
        if stats_file:
            assert self.crawler.stats is not None
            stats = {name: value if isinstance(value, (int, float, str, bool)) or value is None else str(value)
                     for name, value in self.crawler.stats.get_stats().items()}
            Path(stats_file).write_text(json.dumps({"stats": stats, "times": self.times, "reason": reason}),
                                        encoding="utf-8")
