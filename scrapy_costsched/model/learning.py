"""The learning loop shared by the Scrapy tracker and the simulator.

After every visit but the first, the page's history gets the interval and
whether the page changed (or, where a trusted Last-Modified dates the change,
the time since it), with older history faded by half every *half_life*;
its rate is then the posterior under its group's prior
(:func:`~.estimators.estimate_rate`).  At the end of a run each group's prior is
refitted by marginal likelihood with a weak prior on its spread
(:func:`~.estimators.fit_prior`) on a sample of at most :data:`PRIOR_SAMPLE` pages
with history, when there are at least :data:`PRIOR_MIN_PAGES` of them, and the
sampled pages are re-estimated.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .estimators import fit_prior

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .estimators import ChangeStats, RatePrior

__all__ = ["PRIOR_MIN_PAGES", "PRIOR_SAMPLE", "observe", "refit_host_prior", "refit_prior"]

#: Pages per group read at the end of a run to refit the group's prior.
PRIOR_SAMPLE = 500
#: A group's prior is only refitted from this many pages with history; fewer keep the previous one.
PRIOR_MIN_PAGES = 20


def observe(
    stats: ChangeStats,
    interval: float,
    changed: bool,
    half_life: float,
    modified_ago: float | None = None,
    resolution: float = 0.0,
) -> None:
    """Add one visit to *stats*, fading older history by 0.5 ** (interval / half_life).

    *interval* (time since the previous visit) and *half_life* share a unit;
    ``half_life = math.inf`` keeps all history at full weight.

    *modified_ago*, for a changed page whose Last-Modified can be trusted, is
    the time from that date to the visit: the page changed then and not since,
    which has likelihood rate·e^(−rate·modified_ago), far more than "changed
    at least once in *interval*" (Cho & Garcia-Molina, TODS 2003, section 4:
    the last-modified estimator).  It enters as a change within the date's
    *resolution* (HTTP dates: one second; a day where a host's dates bunch at
    one time of the day, :class:`~.trust.DateTiming`), and no earlier than the
    previous visit, followed by *modified_ago* unchanged; what came before
    that change tells nothing more.  A negative age (a date
    ahead of the clock it is read against) counts as zero; a date before the
    previous visit contradicts the history and is not used.

    >>> from scrapy_costsched.model import ChangeStats
    >>> s = ChangeStats()
    >>> observe(s, 1.0, True, 1.0); observe(s, 1.0, False, 1.0)
    >>> s.changed, s.unchanged_time, s.visits
    ({1.0: 0.5}, 1.0, 1.5)
    >>> s = ChangeStats()
    >>> observe(s, 20.0, True, math.inf, modified_ago=6.0, resolution=1e-5)
    >>> s.changed, s.unchanged_time, s.visits
    ({1e-05: 1.0}, 6.0, 1.0)
    """
    if not half_life > 0.0:
        raise ValueError("half_life must be positive")
    decay = 1.0 if half_life == math.inf else 0.5 ** (max(interval, 0.0) / half_life)
    if changed and modified_ago is not None and modified_ago < interval:
        within = min(resolution, interval - max(modified_ago, 0.0))
        stats.add(within, True, decay=decay, then_unchanged=modified_ago)
    else:
        stats.add(interval, changed, decay=decay)


def refit_prior(stats: Sequence[ChangeStats], start: RatePrior) -> RatePrior | None:
    """The group prior refitted on *stats* (pages with history), or None with fewer than PRIOR_MIN_PAGES.

    >>> from scrapy_costsched.model import RatePrior
    >>> refit_prior([], RatePrior()) is None
    True
    """
    if len(stats) < PRIOR_MIN_PAGES:
        return None
    return fit_prior(stats, start=start)


def refit_host_prior(groups: Sequence[tuple[int, Sequence[ChangeStats]]], start: RatePrior) -> RatePrior | None:
    """A host's prior, for its groups too small for one of their own, refitted on all its groups' histories.

    *groups* holds each group's number of pages and its sampled histories in random order (each sample
    is capped at PRIOR_SAMPLE). Each group's share of the pooled sample is its share of the host's pages,
    so a thousand categories do not weigh as much as a million products; None with fewer than
    PRIOR_MIN_PAGES histories in all.

    >>> from scrapy_costsched.model import ChangeStats, RatePrior
    >>> refit_host_prior([(5, [ChangeStats()] * 5)], RatePrior()) is None
    True
    """
    total = sum(size for size, _ in groups)
    if total <= 0:
        return None
    sample = [stats for size, histories in groups for stats in histories[:math.ceil(PRIOR_SAMPLE * size / total)]]
    return refit_prior(sample, start)
