"""``COSTSCHED_CLOCK = "demo_shop.clock.now"``: the crawler reads the same clock as the demo site.

Outside the demo (``DEMO_CLOCK_FILE`` unset) this is the wall clock.
"""

from __future__ import annotations

from demo_site.clock import now

__all__ = ["now"]
