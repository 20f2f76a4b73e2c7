"""In-process crawlers need an installed reactor on Scrapy 2.13 (``get_crawler`` asks for it); newer
Scrapy installs one itself. The asyncio reactor is the one ``scrapy crawl`` uses by default."""

from __future__ import annotations

from scrapy.utils.reactor import install_reactor

install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
