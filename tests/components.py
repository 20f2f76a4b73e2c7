"""The crawl's components driven in-process, without a reactor: one crawl's tracker, spider middleware and
pipeline (:class:`Run`), and the item tests feed them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider, signals
from scrapy.exceptions import DropItem
from scrapy.http import HtmlResponse, Response
from scrapy.utils.test import get_crawler
from twisted.python.failure import Failure

from scrapy_costsched.pipelines import ChangeDetectionPipeline
from scrapy_costsched.spidermiddleware import CostSchedSpiderMiddleware
from scrapy_costsched.tracker import Tracker
from scrapy_costsched.visits import PAGE_META, VALIDATORS_META

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


@dataclass
class Product:
    sku: str
    price: float
    name: str = "kettle"
    ts: str = ""


class ShopSpider(Spider):
    name = "shop"

    def parse(self, response: Any) -> Any:
        return []


class Run:
    """One crawl's tracker, spider middleware and pipeline, without a reactor."""

    def __init__(self, state: Path, settings: dict[str, Any]) -> None:
        self.crawler = get_crawler(ShopSpider, {"COSTSCHED_STATE": str(state), "COSTSCHED_CLOCK": "tests.helpers.fake_now",
                                                **settings})
        self.crawler.spider = self.crawler._create_spider()
        self.tracker = Tracker.of(self.crawler)
        self.tracker.open()
        self.middleware = CostSchedSpiderMiddleware.from_crawler(self.crawler)
        self.pipeline = ChangeDetectionPipeline.from_crawler(self.crawler)

    @property
    def stats(self) -> dict[str, Any]:
        assert self.crawler.stats is not None
        return self.crawler.stats.get_stats()

    def visit(self, url: str, outputs: list[Any], meta: dict[str, Any] | None = None,
              downloaded: Callable[[], None] | None = None, headers: dict[str, str] | None = None,
              landed: str | None = None, pipeline_error: bool = False) -> list[Any]:
        """Fetch *url* once (answered with *headers*, from *landed* if a redirect led there): its callback yields
        *outputs*; returns the items the pipeline let through. With *pipeline_error*, a pipeline before the add-on's
        raises on every item.

        With *downloaded*, the answer leaves the downloader as in a crawl (it is metered), and
        *downloaded* is called before the spider gets it.
        """
        assert isinstance(self.crawler.spider, ShopSpider)
        request = Request(url, callback=self.crawler.spider.parse, meta=dict(meta or {}))
        key = self.tracker.fingerprint(request)
        self.tracker.sighting(request, key)
        request.meta["costsched_page"] = key
        response = HtmlResponse(landed or url, body=b"<html></html>", headers=headers, request=request)
        if downloaded is not None:
            for signal, args in ((signals.response_downloaded, {"response": response}),
                                 (signals.request_left_downloader, {})):
                self.crawler.signals.send_catch_log(signal, request=request, spider=self.crawler.spider, **args)
            downloaded()
        self.middleware.process_spider_input(response)
        kept = []
        for output in self.middleware.process_spider_output(response, outputs):
            if isinstance(output, Request):
                continue
            if pipeline_error:
                self.crawler.signals.send_catch_log(signals.item_error, item=output, response=response,
                                                    spider=self.crawler.spider, failure=Failure(ValueError("bad")))
                continue
            try:
                self.pipeline.process_item(output)
            except DropItem as exc:
                self.crawler.signals.send_catch_log(signals.item_dropped, item=output, response=response,
                                                    exception=exc, spider=self.crawler.spider)
            else:
                kept.append(output)
                self.crawler.signals.send_catch_log(signals.item_scraped, item=output, response=response,
                                                    spider=self.crawler.spider)
        return kept

    def not_modified(self, url: str, headers: dict[str, str] | None = None) -> None:
        """Answer a conditional request for *url* with a 304 (sent with *headers*)."""
        request = Request(url, meta={PAGE_META: self.tracker.fingerprint(Request(url)), VALIDATORS_META: {}})
        self.tracker.not_modified(request, Response(url, status=304, headers=headers, request=request))

    def page(self, url: str) -> Any:
        return self.tracker.page(self.tracker.fingerprint(Request(url)))

    def close(self) -> None:
        self.crawler.signals.send_catch_log(signals.spider_closed, spider=self.crawler.spider, reason="finished")
