"""A spider for ``scrapy runspider``: one request per scheduler edge case."""

from __future__ import annotations

import os
from typing import Any

import scrapy

from tests.stats_spider import StatsFileSpider


class EdgeSpider(StatsFileSpider):
    name = "edge"
    custom_settings = {
        "ADDONS": {"scrapy_costsched.Addon": 0},
        "ROBOTSTXT_OBEY": True,
        "TELNETCONSOLE_ENABLED": False,
        "RETRY_TIMES": 2,
        "LOG_LEVEL": "INFO",
    }

    def __init__(self, site: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.site = site

    async def start(self) -> Any:
        base = self.site
        yield scrapy.Request(f"{base}/page/1", callback=self.parse_item, errback=self.failed)
        yield scrapy.Request(f"{base}/page/1", callback=self.parse_item, dont_filter=True)
        yield scrapy.Request(f"{base}/flaky/2", callback=self.parse_item, errback=self.failed)
        yield scrapy.Request(f"{base}/redirect/3", callback=self.parse_item)
        def not_a_spider_method(response: Any) -> Any:
            return self.parse_item(response)

        yield scrapy.Request(f"{base}/page/4", callback=not_a_spider_method)
        yield scrapy.Request(f"{base}/gone/5", callback=self.parse_item)
        if os.environ.get("EDGE_FRAGMENT"):  # a link to a part of a page, as "last post" links on a forum
            yield scrapy.Request(f"{base}/page/8#reviews", callback=self.parse_item, errback=self.failed)
        if os.environ.get("EDGE_DUPLICATE"):  # one page under two URLs, its items without either
            yield scrapy.Request(f"{base}/page/9", callback=self.parse_title)
            yield scrapy.Request(f"{base}/api?url=/page/9", callback=self.parse_title)
        if os.environ.get("EDGE_CHAIN"):
            yield scrapy.Request(f"{base}/page/6", callback=self.parse_first_half)

    def parse_item(self, response: Any) -> Any:
        self.crawler.stats.inc_value(f"edge/callback/{response.status}")
        yield {"url": response.url, "title": response.css("h1::text").get()}

    def parse_title(self, response: Any) -> Any:
        yield {"title": response.css("h1::text").get()}

    def failed(self, failure: Any) -> None:
        """An errback: what reaches it is counted (a 304 must not)."""
        self.crawler.stats.inc_value(f"edge/errback/{failure.type.__name__}")

    def parse_first_half(self, response: Any) -> Any:
        """A multi-request item: the second half is fetched with the page's meta, so it belongs to page 6."""
        yield response.follow("/page/7", callback=self.parse_second_half, meta=response.meta,
                              cb_kwargs={"first": response.css("h1::text").get()})

    def parse_second_half(self, response: Any, first: str) -> Any:
        yield {"url": response.url, "title": first + " + " + response.css("h1::text").get()}
