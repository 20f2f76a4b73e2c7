"""Score scraped datasets against the catalog's ground truth, exactly (no sampling).

Freshness follows Cho & Garcia-Molina (SIGMOD 2000): a copy is fresh while it equals the live page.
Because every change time is known, the time a copy stays fresh over a window is a closed interval
computation, so the demo's numbers are exact rather than estimated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from demo_site.catalog import TIERS, Catalog, ProductContent

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from demo_site.catalog import Product


class ScrapeMismatch(AssertionError):
    """A scraped item differs from what the site served: the spider (or the demo) is broken."""


@dataclass(frozen=True)
class Copy:
    """The last scraped state of one product in a strategy's dataset."""

    product_id: int
    content: ProductContent
    version: int
    scraped_at: float


@dataclass(frozen=True)
class UpdateCounts:
    """What one crawl's items did to a dataset."""

    items: int  # items received
    new: int  # products seen for the first time
    changed: int  # content differs from the previous copy
    unchanged: int


def parse_price(text: str) -> int:
    """``"12.34"`` -> 1234 cents (exact: money is never a float here)."""
    whole, _, frac = text.strip().lstrip("$").partition(".")
    if not whole.isdigit() or len(frac) != 2 or not frac.isdigit():
        raise ValueError(f"not a price: {text!r}")
    return int(whole) * 100 + int(frac)


@dataclass
class Dataset:
    """product id -> last copy; what a strategy's downstream consumer would hold."""

    copies: dict[int, Copy] = field(default_factory=dict)

    def update(self, catalog: Catalog, items: Iterable[Mapping[str, Any]], t: float) -> UpdateCounts:
        """Merge items scraped while the clock read *t*, checking each against the catalog."""
        new = changed = unchanged = n = 0
        for item in items:
            n += 1
            pid = int(item["product_id"])
            try:
                product = catalog.product(pid)
            except KeyError:
                raise ScrapeMismatch(f"scraped unknown product {pid}") from None
            expected = catalog.content_at(product, t)
            if expected is None:
                raise ScrapeMismatch(f"scraped product {pid} before it exists")
            got = ProductContent(
                name=str(item["name"]),
                price_cents=parse_price(str(item["price"])),
                stock=int(item["stock"]),
            )
            if got != expected or int(item["category"]) != product.category:
                raise ScrapeMismatch(
                    f"product {pid} at t={t}: scraped {got} (category {item['category']}), "
                    f"site served {expected} (category {product.category})"
                )
            previous = self.copies.get(pid)
            if previous is None:
                new += 1
            elif previous.content != got:
                changed += 1
            else:
                unchanged += 1
            self.copies[pid] = Copy(pid, got, catalog.version_at(product, t), t)
        return UpdateCounts(items=n, new=new, changed=changed, unchanged=unchanged)


@dataclass(frozen=True)
class Freshness:
    """Time-averaged freshness over a window: value-weighted, unweighted and per tier."""

    weighted: float
    unweighted: float
    by_tier: dict[str, float]
    products: int  # products that existed at some point in the window


def freshness(
    catalog: Catalog,
    dataset: Dataset,
    t0: float,
    t1: float,
    weights: Mapping[str, float],
    include: Callable[[Product], bool] | None = None,
) -> Freshness:
    """Exact time-averaged freshness of *dataset* over ``[t0, t1)``.

    Each product counts while it exists, with weight ``weights[tier]``; its copy is fresh from the
    window's start until the next change after the copied version (0 without a copy). Copies must
    have been scraped at or before *t0*. *include* limits the score to some products (one part of
    the site, say the hosts that do not throttle).
    """
    if not t1 > t0:
        raise ValueError("freshness requires t1 > t0")
    num = den = unum = uden = 0.0
    tier_num = dict.fromkeys(TIERS, 0.0)
    tier_den = dict.fromkeys(TIERS, 0.0)
    count = 0
    for product in catalog.existing(t1):
        if product.created >= t1 or (include is not None and not include(product)):
            continue
        count += 1
        begin = max(t0, product.created)
        alive = t1 - begin
        fresh = 0.0
        copy = dataset.copies.get(product.id)
        if copy is not None:
            if copy.scraped_at > t0:
                raise ValueError(f"copy of product {product.id} is from after the window start")
            end = min(catalog.version_end(product, copy.version), t1)
            fresh = max(0.0, end - begin)
        w = weights[product.tier]
        num += w * fresh
        den += w * alive
        unum += fresh
        uden += alive
        tier_num[product.tier] += fresh
        tier_den[product.tier] += alive
    return Freshness(
        weighted=num / den if den else math.nan,
        unweighted=unum / uden if uden else math.nan,
        by_tier={k: tier_num[k] / tier_den[k] for k in TIERS if tier_den[k]},
        products=count,
    )
