"""Policy simulator: this project's scheduler against the peers' rules and the optimum.

Pure standard library, like :mod:`scrapy_costsched.model`, whose ranking the
``costsched`` policy calls exactly as the Scrapy scheduler does.  Run it as
``python -m scrapy_costsched.sim --help``.
"""

from __future__ import annotations

from .engine import CYCLE, PolicyResult, RunResult, SimConfig, run_policy, simulate
from .metrics import Metrics, Outcome, Scorer, harmonic, page_metrics
from .policies import POLICIES, make_policy
from .replay import CrawlHistory, load_bing_history, load_jsonl
from .workloads import WORKLOADS, Page, Workload, WorkloadOptions, make_workload

__all__ = [
    "CYCLE",
    "POLICIES",
    "WORKLOADS",
    "CrawlHistory",
    "Metrics",
    "Outcome",
    "Page",
    "PolicyResult",
    "RunResult",
    "Scorer",
    "SimConfig",
    "Workload",
    "WorkloadOptions",
    "harmonic",
    "load_bing_history",
    "load_jsonl",
    "make_policy",
    "make_workload",
    "page_metrics",
    "run_policy",
    "simulate",
]
