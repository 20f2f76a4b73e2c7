"""Cost-aware revisit scheduling for Scrapy."""

from __future__ import annotations

from scrapy_costsched.addon import Addon
from scrapy_costsched.downloadermiddleware import ConditionalRequestMiddleware
from scrapy_costsched.pipelines import ChangeDetectionPipeline
from scrapy_costsched.scheduler import CostAwareScheduler
from scrapy_costsched.spidermiddleware import CostSchedSpiderMiddleware

__all__ = ["Addon", "ChangeDetectionPipeline", "ConditionalRequestMiddleware", "CostAwareScheduler", "CostSchedSpiderMiddleware"]
