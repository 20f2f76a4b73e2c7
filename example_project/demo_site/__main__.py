"""``python -m demo_site``: serve the demo shop (see :mod:`demo_site.server`)."""

from __future__ import annotations

import sys

from demo_site.server import main

if __name__ == "__main__":
    sys.exit(main())
