"""A spider for ``scrapy runspider``: every page of the sites given, as a user's default project would crawl them.

``-a render=1`` marks every page rendered (``costsched_render``), ``-a cost=N`` gives each a ``costsched_cost``.
:class:`PerCallBilling` is a billing model of a user's own.
"""

from __future__ import annotations

from typing import Any

import scrapy

from scrapy_costsched.billing import RequestsBilling
from tests.stats_spider import StatsFileSpider


class PerCallBilling(RequestsBilling):
    """A user's own billing model (``COSTSCHED_BILLING = "tests.health_spider.PerCallBilling"``): an API billing
    every call, at the page's ``costsched_cost`` where the spider gives one."""

    unit = "calls"
    bills_explicit_prices = True


class HealthSpider(StatsFileSpider):
    name = "health"
    custom_settings = {
        "ADDONS": {"scrapy_costsched.Addon": 0},
        "ROBOTSTXT_OBEY": True,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
    }

    def __init__(self, sites: str = "", pages: str = "20", render: str = "", cost: str = "",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sites = sites.split(",")
        self.pages = int(pages)
        self.meta: dict[str, Any] = {}
        if render:
            self.meta["costsched_render"] = True
        if cost:
            self.meta["costsched_cost"] = float(cost)

    async def start(self) -> Any:
        for site in self.sites:
            for number in range(self.pages):
                yield scrapy.Request(f"{site}/p/{number}", callback=self.parse, meta=dict(self.meta))

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "title": response.css("h1::text").get()}
