"""Allow ``python -m anchortrack``."""

from __future__ import annotations

import sys

from anchortrack._cli import main


sys.exit(main())
