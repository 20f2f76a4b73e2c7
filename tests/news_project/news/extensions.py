"""Write the crawl's final stats to the JSON file named by the ``NEWS_STATS_FILE`` setting.

The tests run each crawl as a subprocess and need its numbers (requests made, budget spent)
without parsing logs.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return str(value)


class StatsFileExtension:
    """Dump ``crawler.stats`` as JSON when the spider closes (disabled unless the setting is set).

    It writes at ``spider_closed`` and again at ``engine_stopped``: other components may still set
    stats in their own ``spider_closed`` handlers (and the core sets ``finish_reason`` there), and
    ``engine_stopped`` comes after all of them, so the file ends up with the final numbers.
    """

    def __init__(self, crawler: Crawler, path: str) -> None:
        self.crawler = crawler
        self.path = Path(path)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StatsFileExtension:
        path = crawler.settings.get("NEWS_STATS_FILE")
        if not path:
            raise NotConfigured("NEWS_STATS_FILE is not set")
        ext = cls(crawler, str(path))
        crawler.signals.connect(ext.write, signal=signals.spider_closed)
        crawler.signals.connect(ext.write, signal=signals.engine_stopped)
        return ext

    def write(self) -> None:
        assert self.crawler.stats is not None
        stats = self.crawler.stats.get_stats()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(stats, default=_jsonable, indent=1, sort_keys=True), "utf-8")
        tmp.replace(self.path)
