"""Per-host capacity: how many visits a host's politeness limit lets one run make (pure).

A plan that queues more visits for a host than its download slot can send in the run spends
nothing on them but holds them from pages elsewhere that could be fetched. Kolobov et al.
(SIGIR 2019, "Staying up to date with online content changes using reinforcement learning for
scheduling") show the optimum under per-host politeness limits adds a per-host multiplier to
the global one; with the ranking as the threshold rule, that is: take each host's best pages
only up to its capacity, and let the budget flow on down the ranking to other hosts.

A slot sends one request per ``delay`` seconds when it has one, else up to ``concurrency``
at a time, each taking the host's latency.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = ["DEFAULT_LATENCY", "host_capacity", "within_capacity"]

#: Seconds a response is assumed to take from a host whose latency is not known yet.
DEFAULT_LATENCY = 1.0

_T = TypeVar("_T")


def host_capacity(run_seconds: float, concurrency: int, delay: float, latency: float | None) -> int:
    """Requests a download slot can send in *run_seconds*.

    >>> host_capacity(3600, 8, 0.0, 0.5), host_capacity(3600, 8, 2.0, 0.5), host_capacity(60, 1, 0.0, None)
    (57600, 1800, 60)
    """
    if run_seconds <= 0:
        return 0
    seconds_per_request = delay if delay > 0 else (latency if latency else DEFAULT_LATENCY) / max(concurrency, 1)
    return math.floor(run_seconds / seconds_per_request) if math.isfinite(run_seconds) else 2**62


def within_capacity(ranking: Iterable[_T], host_of: Callable[[_T], str | None],
                    capacity_of: Callable[[str], int]) -> tuple[list[_T], list[_T]]:
    """The *ranking* split into the visits within their host's capacity and those beyond it, in order.

    >>> within_capacity(["a1", "b1", "a2", "a3", "b2"], lambda k: k[0], {"a": 2, "b": 5}.__getitem__)
    (['a1', 'b1', 'a2', 'b2'], ['a3'])
    """
    planned: dict[str, int] = {}
    kept: list[_T] = []
    left_out: list[_T] = []
    for item in ranking:
        host = host_of(item)
        if host is not None:
            if host not in planned:
                planned[host] = 0
            if planned[host] >= capacity_of(host):
                left_out.append(item)
                continue
            planned[host] += 1
        kept.append(item)
    return kept, left_out
