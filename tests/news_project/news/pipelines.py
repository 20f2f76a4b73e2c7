# Define your item pipelines here
#
# Don't forget to add your pipeline to the ITEM_PIPELINES setting
# See: https://docs.scrapy.org/en/latest/topics/item-pipeline.html

from __future__ import annotations

import dataclasses
import datetime
import re
from typing import Any

from itemadapter import ItemAdapter

from .items import Article

_SPACE = re.compile(r"\s+")


class CleanArticlePipeline:
    """Collapse whitespace in an article's text fields, returning a new Article (as many cleaning pipelines do)."""

    def process_item(self, item: Any, spider: Any = None) -> Any:
        if not isinstance(item, Article):
            return item
        return dataclasses.replace(item, title=_clean(item.title), updated=_clean(item.updated), body=_clean(item.body))


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


class StampPipeline:
    """Add the time of scraping to each item, as many projects do (a field that changes on every visit)."""

    def process_item(self, item: Any, spider: Any = None) -> Any:
        return {**ItemAdapter(item).asdict(), "scraped_at": datetime.datetime.now(datetime.timezone.utc).isoformat()}


class WordCountPipeline:
    """Add the body's word count to each article: a field a project adds to its items one day."""

    def process_item(self, item: Any, spider: Any = None) -> Any:
        fields = dataclasses.asdict(item) if isinstance(item, Article) else dict(item)
        return {**fields, "words": len(str(fields.get("body", "")).split())}
