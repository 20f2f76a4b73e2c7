"""The add-on: enables every component with one line in ``ADDONS``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.settings import SETTINGS_PRIORITIES

from scrapy_costsched.downloadermiddleware import ConditionalRequestMiddleware
from scrapy_costsched.errors import stop_crawl
from scrapy_costsched.invocation import debug_command
from scrapy_costsched.pipelines import ChangeDetectionPipeline
from scrapy_costsched.settings import SettingError, get_bool
from scrapy_costsched.spidermiddleware import CostSchedSpiderMiddleware

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

SCHEDULER = "scrapy_costsched.CostAwareScheduler"
_ADDON_PRIORITY = SETTINGS_PRIORITIES["addon"]


class Addon:
    """``ADDONS = {"scrapy_costsched.Addon": 0}``.

    Keeps the previous ``SCHEDULER`` as ``COSTSCHED_FALLBACK_SCHEDULER`` (the
    scheduler CostAwareScheduler wraps), dequeues by download slot with
    ``DownloaderAwarePriorityQueue``, puts the spider middleware before
    ``HttpErrorMiddleware`` (45), ``ConditionalRequestMiddleware`` between
    HttpProxy and DownloaderStats (800), and the pipeline at 800: after the
    cleaning pipelines ``startproject`` suggests at 300, before the pipelines that
    should receive only changes when ``COSTSCHED_DROP_UNCHANGED`` is on.
    Everything is set at ``addon`` priority, so project settings win.

    Under ``scrapy fetch``, ``parse``, ``shell`` and Scrapy's other commands that
    are not crawls it sets nothing: a debugging session must neither spend the
    period's budget nor write the state.
    """

    def update_settings(self, settings: BaseSettings) -> None:
        try:
            enabled = get_bool(settings, "COSTSCHED_ENABLED")
        except SettingError as exc:
            stop_crawl(exc)
        if not enabled:
            return
        command = debug_command()
        if command is not None:
            logger.info("costsched: off for `scrapy %s` (only crawl and runspider use the budget)", command)
            return
        previous = settings.get("SCHEDULER")
        if previous != SCHEDULER:
            if settings.get("COSTSCHED_FALLBACK_SCHEDULER") is None:
                settings.set("COSTSCHED_FALLBACK_SCHEDULER", previous, "addon")
            # Wrap the user's scheduler even when their project set it.
            settings.set("SCHEDULER", SCHEDULER, max(settings.getpriority("SCHEDULER") or 0, _ADDON_PRIORITY))
        settings.set("SCHEDULER_PRIORITY_QUEUE", "scrapy.pqueues.DownloaderAwarePriorityQueue", "addon")
        settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", CostSchedSpiderMiddleware, 45)
        settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", ConditionalRequestMiddleware, 800)
        settings.setdefault_in_component_priority_dict("ITEM_PIPELINES", ChangeDetectionPipeline, 800)
