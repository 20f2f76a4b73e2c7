"""The ``news`` spider: the front page leads to sections, sections to articles, articles yield :class:`Article` items.

A front page's featured links (redirects to an article or a login page, on a site with ``featured``) are followed
as articles.

Arguments (``-a name=value``):

* ``site``: the site's base URL (required).
* ``callbacks=lambda``: sections are parsed by a lambda and articles by a plain function instead of
  spider methods (pages a stored template cannot re-issue).
* ``chain=1``: an article's body comes from a second request, chained with the page's meta to
  ``/moved/<id>``, which the site redirects back to the article.
* ``offsite=1``: also follow the front page's link to another host (``allowed_domains`` keeps it out).
* ``articles=/article/3,/article/9``: article paths to start from too, as a user adds URLs to ``start_urls``.
* ``headlines=1``: section pages also yield a :class:`Headline` item per listed article (pages of many items).
* ``typed=0``: requests carry no ``costsched_page_type``, as in a spider that never tags them: articles are typed by
  their items' class, and the front page and sections, which yield none, stay untyped.
* ``value=high``: article requests carry ``costsched_value`` (as the README's quick start tags products), sections
  none.
* ``section=2``: crawl that section only, from its page rather than the front page (read with ``getattr``, as in
  Scrapy's tutorial: one job of several over parts of the site).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import scrapy

from ..items import Article, Headline

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from scrapy.http import Response


def _flag(value: str) -> bool:
    if value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if value.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected 0/1/true/false, got {value!r}")


def article_from(response: Response) -> Article:
    """An article page's fields as printed (the pipeline cleans them)."""
    article = response.css("article")
    return Article(
        url=response.url,
        id=int(article.attrib.get("data-id", "0")),
        section=int(article.attrib.get("data-section", "-1")),
        title="".join(article.css("h1.title::text").getall()),
        updated=article.css("time.updated::text").get(""),
        body=" ".join(article.css("div.body p::text").getall()),
    )


def parse_article_page(response: Response) -> Iterator[Article]:
    """The article callback of ``-a callbacks=lambda``: a plain function, not a spider method."""
    yield article_from(response)


class NewsSpider(scrapy.Spider):
    name = "news"
    allowed_domains = ["127.0.0.1"]

    def __init__(self, site: str = "", callbacks: str = "methods", chain: str = "0", offsite: str = "0",
                 articles: str = "", headlines: str = "0", typed: str = "1", value: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not site:
            raise ValueError("the news spider needs -a site=URL")
        if callbacks not in ("methods", "lambda"):
            raise ValueError(f"callbacks must be 'methods' or 'lambda', got {callbacks!r}")
        self.site = site.rstrip("/")
        self.start_urls = [self.site + "/"]
        self.lambdas = callbacks == "lambda"
        self.chain = _flag(chain)
        self.offsite = _flag(offsite)
        self.headlines = _flag(headlines)
        self.typed = _flag(typed)
        self.value = value
        self.articles = [site.rstrip("/") + path for path in articles.split(",") if path]

    def _kind(self, page_type: str) -> dict[str, str]:
        """A request's meta naming its page type, unless the spider runs with ``typed=0``; an article's its value too,
        with ``value``."""
        meta = {"costsched_page_type": page_type} if self.typed else {}
        if self.value and page_type == "article":
            meta["costsched_value"] = self.value
        return meta

    async def start(self) -> AsyncIterator[Any]:
        section = getattr(self, "section", None)
        if section is None:
            async for request in super().start():
                yield request
        else:
            yield scrapy.Request(f"{self.site}/section/{section}", callback=self.parse_section,
                                 meta=self._kind("section"))
        for url in self.articles:
            yield scrapy.Request(url, callback=self.parse_article, meta=self._kind("article"))

    def parse(self, response: Response, **kwargs: Any) -> Iterator[scrapy.Request]:
        """The front page: one request per section."""
        callback = (lambda r: self.parse_section(r)) if self.lambdas else self.parse_section
        for href in response.css("a.section::attr(href)").getall():
            yield response.follow(href, callback=callback, meta=self._kind("section"))
        for href in response.css("a.featured::attr(href)").getall():  # redirects
            yield response.follow(href, callback=self.parse_article, meta=self._kind("article"))
        if self.offsite:
            for href in response.css("a.offsite::attr(href)").getall():
                yield response.follow(href, callback=self.parse_article, meta=self._kind("article"))

    def parse_section(self, response: Response) -> Iterator[Headline | scrapy.Request]:
        """A section page: one request per listed article (and per staff-only link), and with ``headlines`` an item
        per listed article."""
        callback = parse_article_page if self.lambdas else self.parse_article
        if self.headlines:
            for link in response.css("a.article"):
                yield Headline(section=response.url, title=link.css("::text").get("").strip(),
                               url=response.urljoin(link.attrib["href"]))
        for href in response.css("a.article::attr(href), a.private::attr(href)").getall():
            yield response.follow(href, callback=callback, meta=self._kind("article"))

    def parse_article(self, response: Response) -> Iterator[Article | scrapy.Request]:
        article = article_from(response)
        if self.chain:
            # The redirect lands on the page this visit just fetched, hence dont_filter.
            yield response.follow(f"/moved/{article.id}", callback=self.parse_second_half, meta=response.meta,
                                  cb_kwargs={"first": article}, dont_filter=True)
            return
        yield article

    def parse_second_half(self, response: Response, first: Article) -> Iterator[Article]:
        """The body, from the chained request's redirected answer."""
        yield dataclasses.replace(first, body=article_from(response).body)
