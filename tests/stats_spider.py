"""The base of the spiders tests run with ``scrapy runspider``: it writes the crawl's stats to a JSON file when
the spider closes, where the test reads them."""

from __future__ import annotations

import json
from typing import Any

import scrapy
from scrapy import signals


class StatsFileSpider(scrapy.Spider):
    """A spider that dumps its crawl's numeric and text stats to ``-a stats_file=PATH`` as it closes."""

    def __init__(self, stats_file: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stats_file = stats_file

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Any:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.dump_stats, signal=signals.spider_closed)
        return spider

    def dump_stats(self) -> None:
        stats = {k: v for k, v in self.crawler.stats.get_stats().items() if isinstance(v, (int, float, str))}
        with open(self.stats_file, "w") as f:
            json.dump(stats, f)
