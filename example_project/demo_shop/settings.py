"""Settings of the demo shop project.

The budget is deliberately not set here: the demo driver passes ``-s COSTSCHED_BUDGET=...`` (and
``-s COSTSCHED_ENABLED=False`` for the plain-Scrapy baselines), as a scheduled job would.
"""

from __future__ import annotations

BOT_NAME = "demo_shop"
SPIDER_MODULES = ["demo_shop.spiders"]
NEWSPIDER_MODULE = "demo_shop.spiders"

ADDONS = {"scrapy_costsched.Addon": 0}
COSTSCHED_BILLING = "requests"
COSTSCHED_VALUE_TIERS = {"low": 0.25, "normal": 1.0, "high": 4.0, "critical": 16.0}
# One clock for site and crawler, so simulated days pass in seconds (see demo_site.clock).
COSTSCHED_CLOCK = "demo_shop.clock.now"

ROBOTSTXT_OBEY = True
LOG_LEVEL = "INFO"
CONCURRENT_REQUESTS = 16
# Loopback hosts: any one may take the whole concurrency, no delay, no throttling.
CONCURRENT_REQUESTS_PER_DOMAIN = 16
DOWNLOAD_DELAY = 0
AUTOTHROTTLE_ENABLED = False
TELNETCONSOLE_ENABLED = False
REMOTE_CONTROL_ENABLED = False  # Scrapy >= 2.19; like telnet, no listening port for a demo

EXTENSIONS = {"demo_shop.extensions.StatsFileExtension": 500}
FEED_EXPORT_ENCODING = "utf-8"
