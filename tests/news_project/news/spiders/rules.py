"""The ``news_rules`` spider: the news site crawled the way many projects write it, as a ``CrawlSpider``.

Rules with link extractors follow the front page to sections and sections to articles; their
``process_request`` hooks tag page types and values; articles are loaded with an ``ItemLoader``.
Planned pages come back through ``CrawlSpider``'s own callback, which finds the page's rule in the
request's meta.

Arguments (``-a name=value``): ``site``, the site's base URL (required).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from itemloaders.processors import Join, MapCompose, TakeFirst
from scrapy.linkextractors import LinkExtractor
from scrapy.loader import ItemLoader
from scrapy.spiders import CrawlSpider, Rule

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http import Response, TextResponse


class ArticleLoader(ItemLoader):
    default_output_processor = TakeFirst()
    title_in = MapCompose(str.strip)
    body_out = Join(" ")


def tag_section(request: Request, response: Response) -> Request:
    request.meta["costsched_page_type"] = "section"
    return request


def tag_article(request: Request, response: Response) -> Request:
    request.meta.update(costsched_page_type="article", costsched_value="high")
    return request


class NewsRulesSpider(CrawlSpider):
    name = "news_rules"
    allowed_domains = ["127.0.0.1"]
    rules = (
        Rule(LinkExtractor(restrict_css="ul.sections"), follow=True, process_request=tag_section),
        Rule(LinkExtractor(restrict_css="ul.articles"), callback="parse_article", process_request=tag_article),
    )

    def __init__(self, site: str = "", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not site:
            raise ValueError("the news_rules spider needs -a site=URL")
        self.start_urls = [site.rstrip("/") + "/"]

    def parse_article(self, response: TextResponse) -> dict[str, Any]:
        loader = ArticleLoader(item={}, response=response)
        loader.add_value("url", response.url)
        loader.add_css("id", "article::attr(data-id)", MapCompose(int))
        loader.add_css("title", "h1.title::text")
        loader.add_css("updated", "time.updated::text")
        loader.add_css("body", "div.body p::text")
        return dict(loader.load_item())
