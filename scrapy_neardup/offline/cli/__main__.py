"""``python -m scrapy_neardup.offline.cli``: the ``scrapy-neardup`` command."""

import sys

from . import main

sys.exit(main())
