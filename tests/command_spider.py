"""The project spider of test_commands: three pages of the loopback site named by the ``SITE`` setting."""

from __future__ import annotations

from typing import Any

import scrapy


class ShopSpider(scrapy.Spider):
    name = "shop"

    async def start(self) -> Any:
        for number in (1, 2, 3):
            yield scrapy.Request(f"{self.settings['SITE']}/page/{number}")

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "title": response.css("h1::text").get()}
