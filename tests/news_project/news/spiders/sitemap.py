"""The ``news_sitemap`` spider: the news site crawled from its sitemap, as a ``SitemapSpider``.

The only start URL is ``/robots.txt``, which names the sitemap; the sitemap lists every article,
parsed by :meth:`parse_article`. Needs a site served with ``sitemap=True``.

Arguments (``-a name=value``): ``site``, the site's base URL (required).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.spiders import SitemapSpider

from .news import article_from

if TYPE_CHECKING:
    from scrapy.http import Response

    from ..items import Article


class NewsSitemapSpider(SitemapSpider):
    name = "news_sitemap"
    allowed_domains = ["127.0.0.1"]
    sitemap_rules = [("/article/", "parse_article")]

    def __init__(self, site: str = "", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not site:
            raise ValueError("the news_sitemap spider needs -a site=URL")
        self.sitemap_urls = [site.rstrip("/") + "/robots.txt"]

    def parse_article(self, response: Response) -> Article:
        return article_from(response)
