"""Items the demo spider yields."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Product:
    """One product page as scraped; ``price`` is kept as printed (decimal text, no float rounding)."""

    url: str
    product_id: int
    name: str
    price: str
    stock: int
    category: int
