"""What the fork server does once, after importing the extraction modules and before it forks a worker:
build the tokenizer's tables (:func:`~scrapy_neardup.engine.text.build_tables`), which a process otherwise
builds on its first page. Every worker forked from the server, recycled ones included, starts with them.

The fork server's only hook is its list of modules to import (``set_forkserver_preload``), so this module
acts on import. The server gives up at any exception but ``ImportError``, so nothing here may raise: a
worker whose server could not build the tables builds them itself.
"""

from __future__ import annotations

import logging


def _build() -> None:
    try:
        from ..engine.text import build_tables

        build_tables()
    except Exception:  # the worker builds them on its first page instead
        logging.getLogger("scrapy_neardup").debug("the fork server did not build the tokenizer's tables", exc_info=True)


_build()
