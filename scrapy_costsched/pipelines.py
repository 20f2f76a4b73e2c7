"""ChangeDetectionPipeline: drops items that did not change, when asked to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.exceptions import DropItem, NotConfigured

from scrapy_costsched.tracker import Tracker

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from typing_extensions import Self


class ChangeDetectionPipeline:
    """Compares items with their page's last record (xxhash over a canonical form).

    A page's record is made of its items as they leave the item pipelines (the
    ``item_scraped`` signal, tied to the page by its response), so any pipeline may
    return a new item object. With ``COSTSCHED_DROP_UNCHANGED``, items equal to the
    page's previous record (or, with ``COSTSCHED_ITEM_KEY``, to the same item last
    time) are dropped here, so the pipelines after this one receive only changes;
    dropped items still count in the record. The add-on puts it at 800: after the
    pipelines that clean items (so it compares final values), before those that
    should see only changes.
    """

    def __init__(self, tracker: Tracker, drop_unchanged: bool) -> None:
        self.tracker = tracker
        self.drop_unchanged = drop_unchanged

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        tracker = Tracker.of(crawler)
        if not tracker.config.enabled:
            raise NotConfigured("COSTSCHED_ENABLED is False")
        return cls(tracker, tracker.config.drop_unchanged)

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        if self.drop_unchanged and self.tracker.is_unchanged(item):
            self.tracker.item_dropped_unchanged(item)
            raise DropItem("costsched: unchanged since the page's last visit", log_level="DEBUG")
        return item
