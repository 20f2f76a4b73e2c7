"""A seeded shop catalog whose products change as Poisson processes with known rates.

Everything here is a pure function of the generation parameters, so the demo driver can ask what
the site showed at any instant and score a scraped dataset's *true* freshness exactly, with no
sampling. Change rates follow the Cho & Garcia-Molina (SIGMOD 2000) mix of average change
intervals (research.md section 5): <= 1 day 23%, 1 day - 1 week 15%, 1 week - 1 month 16%,
1 - 4 months 16%, > 4 months 30%, with log(rate) uniform inside each bucket. About 1% of the
catalog is added per day, so a crawler that never looks for new pages falls behind.

Event times are whole epoch seconds so that HTTP ``Last-Modified`` (second resolution) is exact
and the server's validators can be honest.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from bisect import bisect_right
from dataclasses import dataclass, field

#: 2026-01-01T00:00:00Z: the first instant of the demo's simulated time (UTC midnight, so budget
#: periods of one day line up with simulated days).
EPOCH0 = 1_767_225_600.0
DAY = 86_400.0

#: Value tiers, most valuable first, and their share of the catalog.
TIERS: tuple[str, ...] = ("critical", "high", "normal", "low")
TIER_SHARES: tuple[float, ...] = (0.10, 0.20, 0.40, 0.30)

#: (share, lowest rate, highest rate) per day for the Cho & Garcia-Molina 2000 buckets.
RATE_BUCKETS: tuple[tuple[float, float, float], ...] = (
    (0.23, 1.0, 24.0),  # changes at least daily
    (0.15, 1 / 7, 1.0),  # 1 day - 1 week
    (0.16, 1 / 30, 1 / 7),  # 1 week - 1 month
    (0.16, 1 / 120, 1 / 30),  # 1 - 4 months
    (0.30, 1 / 1000, 1 / 120),  # > 4 months
)

#: Rows of a product page's specification table: real product pages weigh tens of kilobytes, and a
#: ``304`` only pays off against a page much larger than a request's headers (about 9 KB per page).
SPEC_ROWS = 80

# Prices are 100 + (a*v + b) mod PRICE_MODULUS cents: an affine map with a prime modulus is a
# bijection, so two versions of one product below PRICE_MODULUS never show the same price.
PRICE_MODULUS = 99_991

_CATEGORY_NAMES = (
    "Kitchen", "Garden", "Tools", "Toys", "Books", "Audio", "Office", "Outdoor", "Pets", "Bath",
)  # fmt: skip
_ADJECTIVES = (
    "Sturdy", "Compact", "Classic", "Deluxe", "Eco", "Smart", "Rustic", "Nimble", "Bright", "Quiet",
    "Modular", "Vintage",
)  # fmt: skip
_NOUNS = (
    "Kettle", "Lamp", "Drill", "Blender", "Backpack", "Speaker", "Notebook", "Chair", "Planter",
    "Tent", "Toaster", "Headset", "Puzzle", "Mug", "Scale", "Brush",
)  # fmt: skip


def _hash_int(*parts: object) -> int:
    """A stable 64-bit integer from *parts* (``hash()`` is salted per process, so unusable)."""
    key = "/".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def _exact_counts(n: int, shares: tuple[float, ...]) -> list[int]:
    """Split *n* by *shares* with the largest-remainder rule, so the mix is exact, not sampled."""
    raw = [n * s / sum(shares) for s in shares]
    counts = [math.floor(r) for r in raw]
    by_remainder = sorted(range(len(shares)), key=lambda i: raw[i] - counts[i], reverse=True)
    for i in by_remainder[: n - sum(counts)]:
        counts[i] += 1
    return counts


@dataclass(frozen=True)
class ProductContent:
    """What a product page shows for one version."""

    name: str
    price_cents: int
    stock: int

    @property
    def price_text(self) -> str:
        """The price as the page prints it (without the currency sign), e.g. ``"12.34"``."""
        return f"{self.price_cents // 100}.{self.price_cents % 100:02d}"


@dataclass(frozen=True)
class Product:
    """One product: who it is, how much it matters, and when it changes."""

    id: int
    category: int
    tier: str
    rate: float  # lambda, changes per day
    created: float  # epoch seconds; the page is 404 before this
    changes: tuple[float, ...]  # sorted epoch seconds (whole seconds) of every change event

    @property
    def path(self) -> str:
        return f"/product/{self.id}"


@dataclass(frozen=True)
class Catalog:
    """The whole shop over ``[start, start + horizon_days)``; query it at any instant."""

    seed: int
    start: float
    horizon_days: float
    categories: int
    products: tuple[Product, ...]  # ordered by id == by creation time
    _created: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _by_category: tuple[tuple[Product, ...], ...] = field(init=False, repr=False, compare=False)
    _category_created: tuple[tuple[float, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if any(p.id != i + 1 for i, p in enumerate(self.products)):
            raise ValueError("catalog products must have ids 1..n in order")
        created = tuple(p.created for p in self.products)
        if any(a > b for a, b in itertools.pairwise(created)):
            raise ValueError("catalog products must be ordered by creation time")
        by_cat = tuple(tuple(p for p in self.products if p.category == c) for c in range(self.categories))
        object.__setattr__(self, "_created", created)
        object.__setattr__(self, "_by_category", by_cat)
        object.__setattr__(self, "_category_created", tuple(tuple(p.created for p in ps) for ps in by_cat))

    @classmethod
    def generate(
        cls,
        products: int = 300,
        categories: int = 10,
        seed: int = 1,
        start: float = EPOCH0,
        horizon_days: float = 60.0,
        new_per_day: float | None = None,
        rate_buckets: tuple[tuple[float, float, float], ...] = RATE_BUCKETS,
    ) -> Catalog:
        """Build a catalog: *products* exist at *start*, *new_per_day* more arrive later.

        *new_per_day* defaults to 1% of *products*. *rate_buckets* are (share, lowest, highest rate
        per day) with log(rate) uniform inside a bucket; the default is the Cho & Garcia-Molina mix.
        The same arguments always give the same catalog.
        """
        if products < 1 or categories < 1 or horizon_days <= 0:
            raise ValueError("generate requires products >= 1, categories >= 1, horizon_days > 0")
        if new_per_day is None:
            new_per_day = products / 100
        if new_per_day < 0:
            raise ValueError(f"new_per_day must be >= 0, got {new_per_day!r}")
        rng = random.Random(f"demo-catalog/{seed}")
        end = start + horizon_days * DAY
        n_new = round(new_per_day * horizon_days)

        # The initial catalog gets the exact tier / bucket mix and balanced categories.
        tiers = [t for t, n in zip(TIERS, _exact_counts(products, TIER_SHARES), strict=True) for _ in range(n)]
        bucket_shares = tuple(b[0] for b in rate_buckets)
        buckets = [i for i, n in enumerate(_exact_counts(products, bucket_shares)) for _ in range(n)]
        cats = [i % categories for i in range(products)]
        for seq in (tiers, buckets, cats):
            rng.shuffle(seq)
        created = [start] * products
        # Later arrivals are drawn from the same mix.
        new_times = sorted(math.ceil(rng.uniform(start, end)) for _ in range(n_new))
        for t in new_times:
            tiers.append(rng.choices(TIERS, TIER_SHARES)[0])
            buckets.append(rng.choices(range(len(rate_buckets)), bucket_shares)[0])
            cats.append(rng.randrange(categories))
            created.append(float(min(t, end)))

        items: list[Product] = []
        for i, (tier, bucket, cat, born) in enumerate(zip(tiers, buckets, cats, created, strict=True)):
            pid = i + 1
            _, lo, hi = rate_buckets[bucket]
            rate = math.exp(rng.uniform(math.log(lo), math.log(hi)))
            changes = _poisson_times(random.Random(f"demo-product/{seed}/{pid}"), rate, born, end)
            if len(changes) >= PRICE_MODULUS:
                raise ValueError("horizon too long: product versions would repeat prices")
            items.append(Product(pid, cat, tier, rate, born, changes))
        return cls(seed, start, horizon_days, categories, tuple(items))

    # -- queries -----------------------------------------------------------------------------

    @property
    def end(self) -> float:
        """The last instant the catalog has change events for."""
        return self.start + self.horizon_days * DAY

    def product(self, pid: int) -> Product:
        """The product with id *pid* (KeyError if there is none)."""
        if 1 <= pid <= len(self.products):
            return self.products[pid - 1]
        raise KeyError(pid)

    def exists(self, product: Product, t: float) -> bool:
        return product.created <= t

    def existing(self, t: float) -> tuple[Product, ...]:
        """Products that exist at *t*, by id."""
        return self.products[: bisect_right(self._created, t)]

    @staticmethod
    def version_at(product: Product, t: float) -> int:
        """Number of change events at or before *t* (0 = as created)."""
        return bisect_right(product.changes, t)

    @staticmethod
    def version_end(product: Product, version: int) -> float:
        """When *version* stops being live: the next change, or ``inf`` if none is scheduled."""
        return product.changes[version] if version < len(product.changes) else math.inf

    def last_modified(self, product: Product, t: float) -> float:
        """Time of the change that produced the version live at *t* (its creation if none)."""
        v = self.version_at(product, t)
        return product.changes[v - 1] if v else product.created

    def content(self, product: Product, version: int) -> ProductContent:
        """The page's fields for *version*: a pure function of (seed, id, version)."""
        if version < 0 or version >= PRICE_MODULUS:
            raise ValueError(f"version out of range: {version!r}")
        h = _hash_int("name", self.seed, product.id)
        name = f"{_ADJECTIVES[h % len(_ADJECTIVES)]} {_NOUNS[(h >> 8) % len(_NOUNS)]} {product.id}"
        a = 1 + _hash_int("price-a", self.seed, product.id) % (PRICE_MODULUS - 1)
        b = _hash_int("price-b", self.seed, product.id) % PRICE_MODULUS
        price_cents = 100 + (a * version + b) % PRICE_MODULUS
        stock = _hash_int("stock", self.seed, product.id, version) % 250
        return ProductContent(name=name, price_cents=price_cents, stock=stock)

    def content_at(self, product: Product, t: float) -> ProductContent | None:
        """What the product page shows at *t*; ``None`` before the product exists."""
        if not self.exists(product, t):
            return None
        return self.content(product, self.version_at(product, t))

    def description(self, product: Product) -> str:
        """Stable filler text, so pages have realistic sizes for bandwidth billing."""
        h = _hash_int("desc", self.seed, product.id)
        words = [_ADJECTIVES[(h >> (3 * i)) % len(_ADJECTIVES)].lower() for i in range(20)]
        return f"The {self.content(product, 0).name} is a {' and '.join(words[:3])} choice. " + " ".join(
            [f"It is {w}." for w in words] * 3
        )

    def specifications(self, product: Product) -> tuple[tuple[str, str], ...]:
        """Stable (label, value) rows that never change, so pages weigh what real ones do."""
        rows = []
        for i in range(SPEC_ROWS):
            h = _hash_int("spec", self.seed, product.id, i)
            label = f"{_NOUNS[h % len(_NOUNS)]} {_ADJECTIVES[(h >> 8) % len(_ADJECTIVES)].lower()} index {i}"
            rows.append((label, f"{(h >> 16) % 1000 / 10:.1f} of 100, measured in {2000 + (h >> 32) % 26}"))
        return tuple(rows)

    def category_name(self, category: int) -> str:
        return f"{_CATEGORY_NAMES[category % len(_CATEGORY_NAMES)]} {category}"

    def listing_at(self, category: int, t: float) -> tuple[Product, ...]:
        """Products category *category* lists at *t*, by id (IndexError for unknown categories)."""
        if not 0 <= category < self.categories:
            raise IndexError(category)
        return self._by_category[category][: bisect_right(self._category_created[category], t)]

    def listing_version_at(self, category: int, t: float) -> int:
        """A listing only changes when a product joins it, so its size is its version."""
        return len(self.listing_at(category, t))

    def listing_last_modified(self, category: int, t: float) -> float:
        listed = self.listing_at(category, t)
        return max(self.start, listed[-1].created) if listed else self.start


def _poisson_times(rng: random.Random, rate_per_day: float, begin: float, end: float) -> tuple[float, ...]:
    """Event times of a Poisson process on ``(begin, end]``, rounded up to whole seconds."""
    times: list[float] = []
    t = begin
    last = math.ceil(begin)
    rate = rate_per_day / DAY
    while True:
        t += rng.expovariate(rate)
        if t > end:
            break
        # Whole seconds keep Last-Modified exact; never two events in one second.
        s = max(math.ceil(t), last + 1)
        if s > end:
            break
        times.append(float(s))
        last = s
    return tuple(times)
