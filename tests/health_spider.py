"""A spider for ``scrapy runspider``: every page of the sites given, as a user's default project would crawl them."""

from __future__ import annotations

import json
from typing import Any

import scrapy
from scrapy import signals


class HealthSpider(scrapy.Spider):
    name = "health"
    custom_settings = {
        "ADDONS": {"scrapy_costsched.Addon": 0},
        "ROBOTSTXT_OBEY": True,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
    }

    def __init__(self, sites: str = "", pages: str = "20", stats_file: str = "", render: str = "",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sites = sites.split(",")
        self.pages = int(pages)
        self.render = bool(render)
        self.stats_file = stats_file

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> HealthSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.dump_stats, signal=signals.spider_closed)
        return spider

    def dump_stats(self) -> None:
        stats = {k: v for k, v in self.crawler.stats.get_stats().items() if isinstance(v, (int, float, str))}
        with open(self.stats_file, "w") as f:
            json.dump(stats, f)

    async def start(self) -> Any:
        for site in self.sites:
            for number in range(self.pages):
                yield scrapy.Request(f"{site}/p/{number}", callback=self.parse,
                                     meta={"costsched_render": True} if self.render else {})

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "title": response.css("h1::text").get()}
