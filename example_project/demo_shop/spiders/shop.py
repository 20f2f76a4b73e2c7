"""The ``shop`` spider: category listings lead to product pages, which yield :class:`Product` items.

It tags every request with ``costsched_page_type`` and ``costsched_value`` (the tier badge the
listing shows), which is all scrapy-costsched needs to spend a budget where it matters.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scrapy

from demo_shop.items import Product

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from scrapy.http import Response

_PRODUCT_ID = re.compile(r"/product/(\d+)")
_CATEGORY_ID = re.compile(r"/category/(\d+)")


def _flag(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    if value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if value.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected 0/1/true/false, got {value!r}")


class ShopSpider(scrapy.Spider):
    """Crawl the demo shop.

    Arguments (``-a name=value``):

    * ``site``: base URL (default ``$DEMO_SITE_URL``).
    * ``categories``: number of category listings, ``/category/0`` .. ``/category/N-1`` (default 10).
    * ``follow=0``: listings yield no product requests (the scheduler must re-issue stored pages).
    * ``urls_file``: crawl exactly the product URLs in this file (one per line) and nothing else.

    Listings link products on other hosts of the site (``python -m demo_site --hosts ...``), so the
    spider sets no ``allowed_domains``: OffsiteMiddleware then lets every host through.
    """

    name = "shop"

    def __init__(
        self,
        site: str | None = None,
        categories: str | int = 10,
        follow: str | bool = True,
        urls_file: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        base = site or os.environ.get("DEMO_SITE_URL")
        if not base:
            raise ValueError("shop spider needs -a site=URL or $DEMO_SITE_URL")
        self.site = base.rstrip("/")
        self.categories = int(categories)
        self.follow = _flag(follow)
        self.urls_file = urls_file

    async def start(self) -> AsyncIterator[Any]:
        if self.urls_file:
            for line in Path(self.urls_file).read_text(encoding="utf-8").splitlines():
                if url := line.strip():
                    yield scrapy.Request(
                        url,
                        callback=self.parse_product,
                        meta={"costsched_page_type": "product"},
                    )
            return
        for c in range(self.categories):
            yield scrapy.Request(
                f"{self.site}/category/{c}",
                callback=self.parse,
                meta={"costsched_page_type": "listing", "costsched_value": "normal"},
            )

    def parse(self, response: Response, **kwargs: Any) -> Iterator[scrapy.Request]:
        """A category listing: one request per product, valued by its tier badge."""
        if not self.follow:
            return
        for link in response.css("a.product"):
            href = link.attrib.get("href")
            if not href:
                continue
            yield response.follow(
                href,
                callback=self.parse_product,
                meta={
                    "costsched_page_type": "product",
                    "costsched_value": link.attrib.get("data-tier", "normal"),
                },
            )

    def parse_product(self, response: Response) -> Iterator[Product]:
        m = _PRODUCT_ID.search(response.url)
        category = _CATEGORY_ID.search(response.css("a.category::attr(href)").get(""))
        if m is None or category is None:
            self.logger.warning("not a product page: %s", response.url)
            return
        yield Product(
            url=response.url,
            product_id=int(m.group(1)),
            name=response.css("h1.name::text").get("").strip(),
            price=response.css("span.price::text").get("").strip(),
            stock=int(response.css("span.stock::text").get("0")),
            category=int(category.group(1)),
        )
