from __future__ import annotations

import logging
import sys
import types
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import Spider
from scrapy.core.scheduler import Scheduler
from scrapy.utils.test import get_crawler

from scrapy_costsched import (
    ChangeDetectionPipeline,
    ConditionalRequestMiddleware,
    CostAwareScheduler,
    CostSchedSpiderMiddleware,
)

if TYPE_CHECKING:
    from pathlib import Path

ADDON = {"ADDONS": {"scrapy_costsched.Addon": 0}}


def settings_with(**settings: Any) -> Any:
    return get_crawler(Spider, {**ADDON, **settings}).settings


def test_addon_enables_every_component() -> None:
    settings = settings_with()
    assert settings["SCHEDULER"] == "scrapy_costsched.CostAwareScheduler"
    assert settings["COSTSCHED_FALLBACK_SCHEDULER"] == "scrapy.core.scheduler.Scheduler"
    assert settings["SCHEDULER_PRIORITY_QUEUE"] == "scrapy.pqueues.DownloaderAwarePriorityQueue"
    assert settings.getdict("SPIDER_MIDDLEWARES")[CostSchedSpiderMiddleware] == 45
    assert settings.getdict("ITEM_PIPELINES")[ChangeDetectionPipeline] == 800  # after startproject's 300
    assert settings.getdict("DOWNLOADER_MIDDLEWARES")[ConditionalRequestMiddleware] == 800


def test_addon_wraps_the_projects_own_scheduler() -> None:
    settings = settings_with(SCHEDULER="myproject.MyScheduler")
    assert settings["SCHEDULER"] == "scrapy_costsched.CostAwareScheduler"
    assert settings["COSTSCHED_FALLBACK_SCHEDULER"] == "myproject.MyScheduler"


def test_project_settings_win_over_the_addon() -> None:
    settings = settings_with(ITEM_PIPELINES={"scrapy_costsched.ChangeDetectionPipeline": 800},
                             SCHEDULER_PRIORITY_QUEUE="scrapy.pqueues.ScrapyPriorityQueue")
    assert settings.getdict("ITEM_PIPELINES")["scrapy_costsched.ChangeDetectionPipeline"] == 800
    assert settings["SCHEDULER_PRIORITY_QUEUE"] == "scrapy.pqueues.ScrapyPriorityQueue"


def test_disabled_addon_changes_nothing() -> None:
    plain = get_crawler(Spider).settings
    settings = settings_with(COSTSCHED_ENABLED=False)
    for name in ("SCHEDULER", "SCHEDULER_PRIORITY_QUEUE", "SPIDER_MIDDLEWARES", "ITEM_PIPELINES"):
        assert settings[name] == plain[name]


def test_scheduler_wraps_its_fallback(tmp_path: Path) -> None:
    crawler = get_crawler(Spider, {**ADDON, "COSTSCHED_STATE": str(tmp_path / "s.sqlite")})
    crawler.spider = crawler._create_spider("s")
    scheduler = CostAwareScheduler.from_crawler(crawler)
    assert isinstance(scheduler.fallback, Scheduler)


@pytest.mark.parametrize(("setting", "component", "switch"), [
    ("SPIDER_MIDDLEWARES", "scrapy_deltafetch.DeltaFetch", "DELTAFETCH_ENABLED"),
    ("DOWNLOADER_MIDDLEWARES", "scrapy_crawl_once.CrawlOnceMiddleware", "CRAWL_ONCE_ENABLED"),
])
def test_revisit_defeating_middlewares_are_refused(tmp_path: Path, setting: str, component: str, switch: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Stand-ins for the real packages, which are not installed here.
    module_name, class_name = component.rsplit(".", 1)
    module = types.ModuleType(module_name)
    setattr(module, class_name, type(class_name, (), {}))
    monkeypatch.setitem(sys.modules, module_name, module)
    crawler = get_crawler(Spider, {**ADDON, setting: {component: 100}, "COSTSCHED_STATE": str(tmp_path / "s")})
    crawler.spider = crawler._create_spider("s")
    with pytest.raises(ValueError, match=f"{setting} enables {component}.*set {switch} = False"):
        CostAwareScheduler.from_crawler(crawler)
    crawler = get_crawler(Spider, {**ADDON, setting: {component: 100}, switch: False,
                                   "COSTSCHED_STATE": str(tmp_path / "t")})
    crawler.spider = crawler._create_spider("s")
    CostAwareScheduler.from_crawler(crawler)


def test_jobdir_is_detected_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    crawler = get_crawler(Spider, {**ADDON, "JOBDIR": str(tmp_path / "job"), "COSTSCHED_STATE": str(tmp_path / "s")})
    crawler.spider = crawler._create_spider("s")
    CostAwareScheduler.from_crawler(crawler)
    assert "JOBDIR is set" in caplog.text
