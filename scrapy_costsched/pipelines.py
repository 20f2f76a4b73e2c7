"""ChangeDetectionPipeline: hashes each item into its page's record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.exceptions import DropItem, NotConfigured

from scrapy_costsched.tracker import Tracker

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from typing_extensions import Self


class ChangeDetectionPipeline:
    """Hashes items (xxhash over a canonical form) into the record of the page that produced them.

    Put it after the pipelines that clean items, so hashes see final values. With
    ``COSTSCHED_DROP_UNCHANGED`` items equal to the page's previous record (or, with
    ``COSTSCHED_ITEM_KEY``, to the same item last time) are dropped, so pipelines
    after this one receive only changes.
    """

    def __init__(self, tracker: Tracker, drop_unchanged: bool) -> None:
        self.tracker = tracker
        self.drop_unchanged = drop_unchanged
        tracker.pipeline_enabled = True

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        tracker = Tracker.of(crawler)
        if not tracker.config.enabled:
            raise NotConfigured("COSTSCHED_ENABLED is False")
        return cls(tracker, tracker.config.drop_unchanged)

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        unchanged = self.tracker.hash_item(item)
        if unchanged and self.drop_unchanged:
            raise DropItem("costsched: unchanged since the page's last visit")
        return item
