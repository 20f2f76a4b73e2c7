"""``python -m scrapy_costsched.sim``: see :mod:`scrapy_costsched.sim.cli`."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
