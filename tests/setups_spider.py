"""A user's spider for ``scrapy runspider``, with the set-ups real projects have (issue 8's regressions).

``-a paths=/page/1,/page/2`` are its start URLs (paths on ``-a site``, or whole URLs); ``-a chain=1`` makes
``/page/6`` chain a sub-request (with the page's meta) through a redirect; ``-a allowed=host`` sets
``allowed_domains``; ``-a callbacks=lambda`` parses with a lambda; ``-a cookie=name=value`` sets a cookie on
each start request (as spiders choose a region or a currency); ``-a carry=1`` passes an item to the callback in
each start request's meta (as older spiders build an item across pages); ``-a login=1`` logs in first (the
``/login`` form, then its POST, both marked ``costsched_session``; ``login=post`` marks the POST alone, as a
spider with the form in ``start_urls`` can; ``login=unmarked`` neither) and yields its start URLs once logged
in; ``-a odd=1`` adds a set field (iterated in a different order in each process) and a dict with keys of mixed
types to each item; ``-a value_hook=1`` gives the spider a ``costsched_value()`` that reads ``.url`` of what it
is given, as a user writes one for requests alone (it raises on the dict items); ``-a typed=1`` yields each page
as a ``PageRecord`` dataclass rather than a dict; ``-a files=/sized/5{n}`` lists those paths in each item's
``file_urls`` (for ``FilesPipeline``; ``{n}`` is the page's number); ``-a outlive=SECONDS`` moves the clock
(``DEMO_CLOCK_FILE``) that far on at the first page parsed, as a run still going at midnight. ``NewObjectPipeline`` and
``ApiRewriteMiddleware`` are enabled with ``-s`` like any project's components.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import scrapy
from demo_site.clock import CLOCK_ENV, now, set_clock
from itemadapter import ItemAdapter

from tests.stats_spider import StatsFileSpider


class CarriedItem(scrapy.Item):
    source = scrapy.Field()


@dataclass
class PageRecord:
    url: str
    title: str


class SetupsSpider(StatsFileSpider):
    name = "setups"
    custom_settings = {
        "ADDONS": {"scrapy_costsched.Addon": 0},
        "ROBOTSTXT_OBEY": True,
        "TELNETCONSOLE_ENABLED": False,
        "RETRY_TIMES": 2,
        "LOG_LEVEL": "INFO",
        "COSTSCHED_CLOCK": "demo_site.clock.now",
    }

    def __init__(self, site: str = "", paths: str = "", chain: str = "", allowed: str = "",
                 callbacks: str = "methods", odd: str = "", cookie: str = "", carry: str = "", errback: str = "",
                 login: str = "", hubs: str = "", value_hook: str = "", typed: str = "", files: str = "",
                 outlive: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.site = site
        self.paths = [path for path in paths.split(",") if path]
        self.hubs = [path for path in hubs.split(",") if path]
        self.chain = bool(chain)
        if allowed:
            self.allowed_domains = allowed.split(",")
        self.lambdas = callbacks == "lambda"
        self.odd = bool(odd)
        name, _, value = cookie.partition("=")
        self.cookies: dict[str | bytes, str | bytes | bool | float | int] = {name: value} if cookie else {}
        self.carry = bool(carry)
        self.errback = bool(errback)
        self.login = login
        self.typed = bool(typed)
        self.files = [path for path in files.split(",") if path]
        self.outlive = float(outlive or 0)
        if value_hook:
            self.costsched_value = lambda source: "high" if source.url.endswith("/page/1") else None

    async def start(self) -> Any:
        if self.login:
            yield scrapy.Request(self.site + "/login", callback=self.parse_login,
                                 meta={"costsched_session": True} if self.login == "1" else {})
            return
        for request in self._start_requests():
            yield request

    def parse_login(self, response: Any) -> Any:
        token = response.css("input[name=token]::attr(value)").get()
        yield scrapy.FormRequest(self.site + "/login", formdata={"token": token}, callback=self.after_login,
                                 meta={"costsched_session": True} if self.login != "unmarked" else {})

    def after_login(self, response: Any) -> Any:
        if response.css("h1::text").get() == "welcome":
            yield from self._start_requests()

    def _start_requests(self) -> Any:
        for path in self.hubs:
            yield scrapy.Request(self.site + path, callback=self.parse_hub)
        for path in self.paths:
            url = path if "://" in path else self.site + path
            if self.carry:
                yield scrapy.Request(url, callback=self.parse_carried, meta={"carried": CarriedItem(source=path)})
                continue
            callback = (lambda response: self.parse_page(response)) if self.lambdas else self.parse_page
            yield scrapy.Request(url, callback=callback, cookies=self.cookies,
                                 errback=self.failed if self.errback else None)

    def parse_page(self, response: Any) -> Any:
        if self.outlive:
            set_clock(os.environ[CLOCK_ENV], now() + self.outlive)
            self.outlive = 0.0
        if response.css("p.sold"):  # a listing gone that still answers 200: nothing to scrape
            return
        title = response.css("h1::text").get()
        if self.chain and response.url.endswith("/page/6"):
            yield response.follow("/redirect/7", callback=self.parse_second_half, meta=response.meta,
                                  cb_kwargs={"first": title})
            return
        if self.typed:
            yield PageRecord(url=response.url, title=title)
            return
        item: dict[str, Any] = {"url": response.url, "title": title}
        if self.files:
            number = response.url.rstrip("/").rsplit("/", 1)[-1]
            item["file_urls"] = [response.urljoin(path.format(n=number)) for path in self.files]
        if self.odd:
            item["tags"] = {f"tag-{n}" for n in range(20)}
            item["specs"] = {1: "one", "b": 2}
        yield item

    def parse_hub(self, response: Any) -> Any:
        """Pages of another kind (a category, say), parsed by a callback of their own."""
        yield {"url": response.url, "title": response.css("h1::text").get(), "hub": True}

    def failed(self, failure: Any) -> None:
        """An errback: what reaches it is counted."""
        self.crawler.stats.inc_value(f"setups/errback/{failure.type.__name__}")

    def parse_carried(self, response: Any) -> Any:
        carried = response.meta["carried"]
        yield {"url": response.url, "title": response.css("h1::text").get(), "source": carried["source"]}

    def parse_second_half(self, response: Any, first: str) -> Any:
        yield {"url": response.url, "title": f"{first} + {response.css('h1::text').get()}"}


class NewObjectPipeline:
    """A cleaning pipeline as many projects write one: it returns a new item object, a dict."""

    def process_item(self, item: Any, spider: Any = None) -> Any:
        return {key: value.strip() if isinstance(value, str) else value for key, value in ItemAdapter(item).items()}


class ApiRewriteMiddleware:
    """As scraping-API plugins do: every request is sent to the API with the target URL in its query."""

    def process_request(self, request: Any, spider: Any = None) -> Any:
        if "/api?url=" in request.url or request.url.endswith("/robots.txt"):
            return None
        scheme, _, rest = request.url.partition("://")
        host, _, path = rest.partition("/")
        return request.replace(url=f"{scheme}://{host}/api?url=/{path}")
