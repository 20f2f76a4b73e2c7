"""A deterministic demo shop whose pages change at known Poisson rates.

The catalog (:mod:`demo_site.catalog`) is pure and seeded, so the demo driver can compute the
*true* freshness of any scraped dataset exactly; the server (:mod:`demo_site.server`) serves the
catalog as it looks at the shared clock's current time (:mod:`demo_site.clock`).
"""

from __future__ import annotations

from demo_site.catalog import EPOCH0, TIERS, Catalog, Product, ProductContent

__all__ = ["EPOCH0", "TIERS", "Catalog", "Product", "ProductContent"]
