"""What a hub is worth: the new pages it reveals.

Index, category and listing pages (hubs) lead to pages the crawl does not know
yet. Rated by their own record alone, a hub that changes several times a day is
written off under the freshness objective and the pages only it links to are
never found. Dasgupta et al. (WWW 2007) measure discovery by the fetches spent
per new page and estimate each page's yield of links to new content from its
history; Lefortier et al. (CIKM 2013) schedule the recrawl of content sources
by the rate at which each one reveals new pages. This module keeps that rate
per hub:

==========================  =====================================================
Name                        Use
==========================  =====================================================
:class:`LinkPrior`          gamma prior on a hub's rate of new links per day
:func:`pooled_prior`        a group's prior, from what its pages revealed
:class:`NewLinkStats`       down-weighted new-link counts and exposure of a hub
:func:`expected_new`        new links a visit after *elapsed* days should reveal
:class:`Discovery`          what :mod:`~.scoring` needs to price a hub visit
==========================  =====================================================

New links are taken to arrive as a Poisson process with rate μ per day, so a
visit *t* days after the previous one reveals Poisson(μt) of them; with a
Gamma(shape, days) prior the posterior after *n* links over *T* days of
exposure is Gamma(shape + n, days + T), with mean (shape + n) / (days + T)
(the Poisson model's conjugate prior: Gelman et al., *Bayesian Data Analysis*,
3rd ed., 2013, section 2.6).

References:

- A. Dasgupta, A. Ghosh, R. Kumar, C. Olston, S. Pandey, A. Tomkins, "The
  discoverability of the web", WWW 2007,
  https://archives.iw3c2.org/www2007/paper592.php.html
- D. Lefortier, L. Ostroumova, E. Samosvat, P. Serdyukov, "Timely crawling of
  high-quality ephemeral new content", CIKM 2013, https://arxiv.org/abs/1307.6080
- A. P. Dempster, N. M. Laird, D. B. Rubin, "Maximum likelihood from incomplete
  data via the EM algorithm", JRSS B 39(1), 1977 (the censored counts below).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["Discovery", "LinkPrior", "NewLinkStats", "expected_new", "pooled_prior"]

_MIN_INTERVAL = 1e-9  # as in estimators.ChangeStats: intervals <= 0 count as tiny


@dataclass(frozen=True)
class LinkPrior:
    """Gamma prior on a hub's rate of new links: *shape* pseudo-links seen over *days* pseudo-days.

    The default, half a link in one day (prior mean 0.5 a day), is weak: one
    day of real exposure weighs as much. It keeps a hub that has never been
    seen to reveal anything worth an occasional visit: with history faded by
    half every *h* days, exposure levels off near h / ln 2 days, so such a hub's
    rate sinks towards 0.5 / (1 + h / ln 2) a day but never reaches zero.

    >>> LinkPrior().mean
    0.5
    """

    shape: float = 0.5
    days: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.shape < math.inf:
            raise ValueError("shape must be positive and finite")
        if not 0.0 < self.days < math.inf:
            raise ValueError("days must be positive and finite")

    @property
    def mean(self) -> float:
        return self.shape / self.days

    def rate(self, links: float, days: float) -> float:
        """Posterior mean of new links per day after *links* new links over *days* days of exposure,
        (shape + links) / (days + exposure).

        >>> LinkPrior().rate(4.0, 2.0)
        1.5
        """
        return (self.shape + links) / (self.days + days)


def pooled_prior(pages: Iterable[NewLinkStats], prior: LinkPrior | None = None) -> LinkPrior | None:
    """The prior for a group of pages (a host's page type): *prior*'s weight, centred on the group's pooled rate.

    Every page that links out is a potential hub, and with only *prior* a page's first visits price it at
    half a new page a day, whatever its kind: a product page that links to its brand would draw the budget
    from pages that change. The pages of a kind reveal new links at similar rates, so their pooled rate,
    (shape + Σ links) / (days + Σ exposure), is the mean a page of the group starts from (empirical Bayes,
    as the change-rate priors are fitted per group; Gelman et al. 2013, section 5.1); the prior keeps
    *prior*'s weight in days, so a page's own history soon outweighs it. ``None`` before any page of the
    group has been exposed (two visits).

    >>> pooled_prior([NewLinkStats(links=0.0, days=40.0)])
    LinkPrior(shape=0.012195121951219513, days=1.0)
    >>> pooled_prior([NewLinkStats(links=30.0, days=10.0), NewLinkStats()]).mean > 2.5
    True
    >>> pooled_prior([NewLinkStats()]) is None
    True
    """
    p = LinkPrior() if prior is None else prior
    links = days = 0.0
    for stats in pages:
        links += stats.links
        days += stats.days
    if days <= 0.0:
        return None
    return LinkPrior(shape=p.rate(links, days) * p.days, days=p.days)


def expected_new(rate: float, elapsed: float, cap: float = math.inf) -> float:
    """New links a visit *elapsed* days after the last one should reveal: min(rate × elapsed, cap).

    *cap* is how many new links one visit can show at most (a list of the
    newest K shows at most K; ``math.inf`` when no visit has filled it).
    Never visited (``elapsed = math.inf``), an uncapped hub is expected to
    reveal without bound.

    >>> expected_new(2.0, 3.0), expected_new(2.0, 3.0, cap=4.0), expected_new(0.0, math.inf)
    (6.0, 4.0, 0.0)

    A negative or infinite rate, a negative elapsed time and a cap <= 0 raise ValueError.
    """
    if not 0.0 <= rate < math.inf:
        raise ValueError("rate must be finite and non-negative")
    if not elapsed >= 0.0:
        raise ValueError("elapsed must be non-negative")
    if not cap > 0.0:
        raise ValueError("cap must be positive")
    if rate == 0.0 or elapsed == 0.0:
        return 0.0
    return min(rate * elapsed, cap)


def _mean_at_least(n: int, x: float) -> float:
    """E[N | N >= n] for N ~ Poisson(x), n >= 1.

    E[N·1{N >= n}] = x·P(N >= n − 1), so E[N | N >= n] = x + x·p(n − 1) / P(N >= n)
    with p the probability mass. Below x = n the ratio P(N >= n) / p(n − 1) is
    summed as x/n + x²/(n(n+1)) + … (terms shrink geometrically); above, the
    tail is 1 − P(N < n), at least about one half, so nothing cancels.
    """
    if x == 0.0:
        return float(n)
    if x < n:
        ratio = term = x / n
        k = n
        while term > 1e-17 * ratio:
            k += 1
            term *= x / k
            ratio += term
        return x + x / ratio
    log_x = math.log(x)
    below = math.fsum(math.exp(k * log_x - x - math.lgamma(k + 1)) for k in range(n))
    return x + x * math.exp((n - 1) * log_x - x - math.lgamma(n)) / (1.0 - below)


@dataclass
class NewLinkStats:
    """A hub's history of new links, in constant space: down-weighted links and exposure days.

    ``observe(new_links, interval_days, half_life_days)`` adds one visit:
    *new_links* outlinks to pages the crawl did not know, found *interval_days*
    after the previous visit; older history first fades by
    0.5 ** (interval / half_life), as :func:`~.learning.observe` fades change
    histories, so the rate follows a hub that speeds up or dries up.

    Capacity: a hub that lists only its newest K links cannot show more than K
    new ones in a visit, however long it waited. A visit whose new links fill
    all it *listed* saw the list turn over: the hub is *saturated*, and
    :attr:`cap` (the most new links seen in one visit) bounds
    :meth:`expected`. Such a visit's count is censored, only "at least
    *new_links*" arrived; counting it as is would bias the rate low, so the
    hub would be visited less and saturate again. It enters instead as
    E[N | N >= new_links] at the rate estimated so far (one EM step, Dempster
    et al. 1977), which is more than *new_links*, so repeated saturation raises
    the rate until visits come often enough to see the list not turn over.

    >>> s = NewLinkStats()
    >>> s.observe(3, 1.0, math.inf); s.observe(1, 1.0, math.inf)
    >>> s, s.rate()
    (NewLinkStats(links=4.0, days=2.0, most=3, saturated=False), 1.5)
    >>> NewLinkStats.from_json(s.to_json()) == s
    True
    """

    links: float = 0.0
    days: float = 0.0
    most: int = 0
    """The most new links seen in one visit."""
    saturated: bool = False
    """Some visit's new links filled everything it listed."""

    def observe(
        self,
        new_links: int,
        interval_days: float,
        half_life_days: float,
        listed: int | None = None,
        prior: LinkPrior | None = None,
    ) -> None:
        """Add one visit that found *new_links* new outlinks *interval_days* after the previous one.

        *listed*, when known, is how many of the visit's outlinks could have
        been new (``new_links == listed > 0`` is a list that turned over); leave
        it unset when the hub also shows links that never change, or it would
        never look full. *prior* is the one :meth:`rate` is read with (the
        default :class:`LinkPrior` if unset), used to fill in a censored count.
        ``half_life_days = math.inf`` keeps all history at full weight.

        >>> s = NewLinkStats(links=2.0, days=1.0)
        >>> s.observe(1, 2.0, 2.0); s.links, s.days
        (2.0, 2.5)
        >>> s.observe(5, 1.0, math.inf, listed=5); s.saturated, s.most, round(s.links, 3)
        (True, 5, 7.13)

        Negative or non-integral counts, *listed* below *new_links*, a NaN or
        infinite interval, and a half-life <= 0 raise ValueError.
        """
        if isinstance(new_links, bool) or not isinstance(new_links, int) or new_links < 0:
            raise ValueError("new_links must be a non-negative integer")
        if listed is not None and (isinstance(listed, bool) or not isinstance(listed, int) or listed < new_links):
            raise ValueError("listed must be an integer of at least new_links")
        if math.isnan(interval_days) or interval_days == math.inf:
            raise ValueError("interval_days must be finite")
        if not half_life_days > 0.0:
            raise ValueError("half_life_days must be positive")
        interval = max(interval_days, _MIN_INTERVAL)
        full = listed is not None and new_links == listed > 0
        count = _mean_at_least(new_links, self.rate(prior) * interval) if full else float(new_links)
        decay = 1.0 if half_life_days == math.inf else 0.5 ** (interval / half_life_days)
        self.links = self.links * decay + count
        self.days = self.days * decay + interval
        self.most = max(self.most, new_links)
        self.saturated = self.saturated or full

    def rate(self, prior: LinkPrior | None = None) -> float:
        """Posterior mean of new links per day, (shape + links) / (days + exposure).

        >>> NewLinkStats().rate(), NewLinkStats(links=0.0, days=99.0).rate()
        (0.5, 0.005)
        """
        return (LinkPrior() if prior is None else prior).rate(self.links, self.days)

    @property
    def cap(self) -> float:
        """The most new links one visit can show: :attr:`most` once saturated, else ``math.inf``."""
        return float(self.most) if self.saturated else math.inf

    def expected(self, elapsed_days: float, prior: LinkPrior | None = None) -> float:
        """New links a visit *elapsed_days* after the last one should reveal (:func:`expected_new`).

        >>> NewLinkStats(links=20.0, days=9.0, most=10, saturated=True).expected(7.0)
        10.0
        """
        return expected_new(self.rate(prior), elapsed_days, self.cap)

    def to_json(self) -> list[float]:
        """Compact JSON-able form ``[links, days, most, saturated]`` (saturated as 0 or 1)."""
        return [self.links, self.days, self.most, int(self.saturated)]

    @classmethod
    def from_json(cls, data: object) -> NewLinkStats:
        """Rebuild from :meth:`to_json` output; malformed data raises ValueError."""
        if not (isinstance(data, (list, tuple)) and len(data) == 4):
            raise ValueError("malformed new-link stats: expected [links, days, most, saturated]")
        links, days, most, saturated = data
        if not (_is_number(links) and _is_number(days) and _is_count(most) and saturated in (0, 1)
                and _is_count(saturated) and (most > 0 or not saturated)):  # a saturated visit showed new links
            raise ValueError("malformed new-link stats: bad field values")
        return cls(float(links), float(days), most, bool(saturated))


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x < math.inf


def _is_count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


class Discovery(NamedTuple):
    """What a hub visit reveals, as :func:`~.scoring.score` prices it (:attr:`.scoring.Candidate.hub`).

    *rate* is the hub's new links per day (:meth:`NewLinkStats.rate`), *cap*
    the most one visit can show (:attr:`NewLinkStats.cap`); *value* is the
    value of one new page, *cost* what fetching one is expected to cost, and
    *page_rate* the change rate a new page is planned with (its group prior's,
    as the scheduler ranks new URLs).
    """

    rate: float
    value: float
    cost: float
    page_rate: float
    cap: float = math.inf

    def new_gain(self, changes: bool) -> float:
        """A new page's gain: its value, over its planned rate under the freshness objective (never fetched, its
        expected stale time a visit ends is 1/rate), as is under ``changes``.

        >>> Discovery(rate=2.0, value=1.0, cost=1.0, page_rate=0.25).new_gain(changes=False)
        4.0
        """
        return self.value if changes else self.value / self.page_rate
