"""Host health: how likely an attempt at a host succeeds, and what that does to a visit's price (pure).

A host that throttles (429, 503) or fails (timeouts, refused connections, 5xx) makes
each successful visit take several attempts. With a per-attempt success probability
*p*, attempts until a success are geometric, so a success costs on average
``(1 − p) / p`` failed attempts on top of itself (:func:`visit_cost`). What a failed
attempt costs is the billing model's business: bytes that moved under bandwidth, a
request under requests, nothing under credits; so a sick host sinks in the ranking
exactly as far as its failures cost money, with no arbitrary multiplier (design.md,
"host health").

*p* is read from recent attempts: each attempt weighs the past by
:data:`ATTEMPT_MEMORY` (about the last ten attempts decide, so a host that starts
throttling sinks within the run), and evidence fades with time when no attempt is
made (half of it a :data:`RECOVERY_HALF_LIFE` days), so a host written off gets
tried again and recovers as it does. A prior of one success keeps a new host healthy.

Retry-After blocks are kept here too, in real epoch seconds (the server's clock
runs in real time even when the crawl's ``COSTSCHED_CLOCK`` is simulated), and so
are the pauses a host that is down earns without asking (:func:`outage_pause`):
raising a price does not keep a crawl of one host off it, as there is nothing
cheaper to send instead, so a site in maintenance answering 503 took a whole day's
budget in retries. Nutch drops a host's fetch queue after
``fetcher.max.exceptions.per.queue`` failures for the same reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ATTEMPT_MEMORY", "MAX_FAILURES_PER_SUCCESS", "MAX_OUTAGE_PAGES", "OK", "OUTAGE_EVIDENCE", "OUTAGE_PAGES",
           "OUTAGE_PAUSE", "OUTCOMES", "RECOVERY_HALF_LIFE", "HostHealth", "outage_pages", "outage_pause", "outcome_of",
           "visit_cost"]

OK = "ok"
#: What an attempt can come to: an answer, or one of the failures health counts.
OUTCOMES = (OK, "throttled", "unavailable", "server_error", "timeout", "connection")
#: The weight each attempt leaves to the attempts before it.
ATTEMPT_MEMORY = 0.9
#: Days after which, without attempts, half the evidence about a host is forgotten.
RECOVERY_HALF_LIFE = 1.0
#: A new host counts as having answered once.
PRIOR_SUCCESSES = 1.0
#: Failed attempts a success is priced with at most (p = 1/51): beyond, the host is as good as down.
MAX_FAILURES_PER_SUCCESS = 50.0
#: Weight of a new latency or failed-attempt size in its moving mean.
MEAN_WEIGHT = 0.2
#: Distinct pages of a host that fail in a row, with no answer between, before the host is taken for down
#: (one page failing again and again is the page's business: its retries count once)...
OUTAGE_PAGES = 3
#: ... or more for a host that failed often before (:func:`outage_pages`), but never more than this.
MAX_OUTAGE_PAGES = 10
#: How unlikely such a streak must be at the failure rate the host showed before it.
OUTAGE_EVIDENCE = 1e-4
#: Seconds a host taken for down first gets no request; each outage in a row doubles it.
OUTAGE_PAUSE = 600.0


def outcome_of(status: int | None, exception: str | None = None) -> str:
    """The health outcome of an attempt answered with *status*, or failed with an exception named *exception*.

    Any answer that is not 429 or 5xx means the host works (a 404 is the page's business).

    >>> outcome_of(200), outcome_of(404), outcome_of(429), outcome_of(503), outcome_of(502)
    ('ok', 'ok', 'throttled', 'unavailable', 'server_error')
    >>> outcome_of(None, "TimeoutError"), outcome_of(None, "ConnectionRefusedError")
    ('timeout', 'connection')
    """
    if status is not None:
        if status == 429:
            return "throttled"
        if status == 503:
            return "unavailable"
        return "server_error" if status >= 500 else OK
    name = (exception or "").lower()
    return "timeout" if "timeout" in name or "timedout" in name else "connection"


def outage_pages(p_success: float) -> int:
    """Distinct pages that must fail in a row to take a host for down, whose attempts succeeded with
    probability *p_success* before the streak began: as many as make the streak a :data:`OUTAGE_EVIDENCE`
    chance, so a site where some pages always answer 500 is not taken for down when a few of them come
    together (between :data:`OUTAGE_PAGES` and :data:`MAX_OUTAGE_PAGES`).

    >>> outage_pages(1.0), outage_pages(0.95), outage_pages(0.7), outage_pages(0.2)
    (3, 4, 8, 10)
    """
    failure = 1.0 - p_success
    if failure <= 0.0:
        return OUTAGE_PAGES
    if failure >= 1.0:
        return MAX_OUTAGE_PAGES
    return min(max(math.ceil(math.log(OUTAGE_EVIDENCE) / math.log(failure)), OUTAGE_PAGES), MAX_OUTAGE_PAGES)


def outage_pause(outages: int, longest: float) -> float:
    """Seconds of the pause a host taken for down for the *outages*-th time in a row gets: doubled each time
    (a circuit breaker's backoff: a host down for a day is probed ever more rarely), at most *longest*.

    >>> outage_pause(1, 3600.0), outage_pause(2, 3600.0), outage_pause(5, 3600.0)
    (600.0, 1200.0, 3600.0)
    """
    return min(OUTAGE_PAUSE * 2.0 ** min(max(outages - 1, 0), 30), longest)


def visit_cost(success_cost: float, failure_cost: float, expected_failures: float) -> float:
    """What a successful visit costs: its own attempt and the failed ones expected before it.

    >>> visit_cost(10.0, 2.0, 0.0), visit_cost(10.0, 2.0, 3.0), visit_cost(1.0, 0.0, 9.0)
    (10.0, 16.0, 1.0)
    """
    return success_cost + failure_cost * expected_failures


@dataclass
class HostHealth:
    """One host's recent attempts, failures by kind, latency, and the Retry-After block it asked for.

    *attempts* and *successes* are decayed counts as of day *updated* (the crawl's clock);
    *failures* counts every failure ever, by outcome; *blocked_until* is epoch seconds; *outages*
    counts the pauses the host earned by failing (:func:`outage_pause`) since its last answer, and
    *outage* says whether the block running now is one of them (else the host asked for it).
    """

    attempts: float = 0.0
    successes: float = 0.0
    updated: float = 0.0
    failed_size: float = 0.0
    latency: float | None = None
    blocked_until: float = 0.0
    blocks: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    outages: int = 0
    outage: bool = False

    def _fade(self, today: float) -> float:
        """The weight evidence from day :attr:`updated` keeps on *today*."""
        return float(0.5 ** (max(today - self.updated, 0.0) / RECOVERY_HALF_LIFE))

    def observe(self, outcome: str, today: float, size: float = 0.0, latency: float | None = None,
                page: bool = True) -> None:
        """One attempt's *outcome* (:data:`OUTCOMES`), the bytes it moved and its latency in seconds; *page*:
        whether it was a page's (an answer of robots.txt, often served while the pages are not, ends no outage).

        >>> health = HostHealth()
        >>> for _ in range(10): health.observe("throttled", 0.0)
        >>> round(health.p_success(0.0), 3), health.failures
        (0.133, {'throttled': 10})
        """
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown attempt outcome {outcome!r}")
        fade = self._fade(today) * ATTEMPT_MEMORY
        self.updated = max(self.updated, today)
        self.attempts = self.attempts * fade + 1.0
        self.successes = self.successes * fade + (outcome == OK)
        if outcome == OK:
            self.outages = 0 if page else self.outages
        else:
            self.failures[outcome] = self.failures.get(outcome, 0) + 1
            total = sum(self.failures.values())
            self.failed_size += (size - self.failed_size) * max(1.0 / total, MEAN_WEIGHT)
        if latency is not None and math.isfinite(latency) and latency >= 0:
            self.latency = latency if self.latency is None else self.latency + (latency - self.latency) * MEAN_WEIGHT

    def p_success(self, today: float) -> float:
        """The probability that an attempt made on *today* gets an answer.

        >>> HostHealth().p_success(0.0)
        1.0
        >>> sick = HostHealth(attempts=10.0, successes=0.0, updated=0.0)
        >>> round(sick.p_success(0.0), 3), round(sick.p_success(3.0), 3)
        (0.091, 0.444)
        """
        fade = self._fade(today)
        return (self.successes * fade + PRIOR_SUCCESSES) / (self.attempts * fade + PRIOR_SUCCESSES)

    def expected_failures(self, today: float) -> float:
        """Failed attempts a success costs on average, ``(1 − p) / p``, capped.

        >>> HostHealth().expected_failures(0.0), HostHealth(attempts=3.0, successes=1.0).expected_failures(0.0)
        (0.0, 1.0)
        """
        p = self.p_success(today)
        return min((1.0 - p) / p, MAX_FAILURES_PER_SUCCESS)

    def block(self, until: float, outage: bool = False) -> bool:
        """Obey a Retry-After up to epoch second *until* (with *outage*, a pause the host earned by failing);
        ``True`` if that extends the block."""
        if until <= self.blocked_until:
            return False
        self.blocked_until = until
        self.blocks += 1
        self.outage = outage
        if outage:
            self.outages += 1
        return True

    def blocked_for(self, now: float) -> float:
        """Seconds from epoch second *now* until the host may be sent a request (0 when it may now)."""
        return max(self.blocked_until - now, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "successes": self.successes, "updated": self.updated,
                "failed_size": self.failed_size, "latency": self.latency, "blocked_until": self.blocked_until,
                "blocks": self.blocks, "failures": dict(self.failures), "outages": self.outages, "outage": self.outage}

    @classmethod
    def from_json(cls, data: object) -> HostHealth:
        if not isinstance(data, dict):
            raise ValueError(f"malformed host health: {data!r}")
        try:
            health = cls(**data)
        except TypeError:
            raise ValueError(f"malformed host health: {data!r}") from None
        numbers = (health.attempts, health.successes, health.updated, health.failed_size, health.blocked_until)
        if not all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) for n in numbers) \
                or not 0 <= health.successes <= health.attempts or not isinstance(health.failures, dict) \
                or not all(k in OUTCOMES and isinstance(v, int) for k, v in health.failures.items()) \
                or not isinstance(health.outages, int) or health.outages < 0 or not isinstance(health.outage, bool):
            raise ValueError(f"malformed host health: {data!r}")
        return health
