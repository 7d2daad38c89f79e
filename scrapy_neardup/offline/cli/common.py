"""What the commands share: the configuration their options make, outputs written whole or not at all,
Ctrl-C, a store opened for maintenance."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

from ...assembly import build_store
from ...store import REDIS_SCHEMES

#: Characters a URL may carry (from a hostile or broken dump) that would break a line of the TSV output.
_TSV_ESCAPES = str.maketrans({"\t": "%09", "\n": "%0A", "\r": "%0D"})


def tsv_field(url: str) -> str:
    """A URL as one TSV field: tabs and line breaks percent-encoded, as a browser sends them."""
    return url.translate(_TSV_ESCAPES)


def config_of(settings: dict[str, Any]):
    from ...settings import Config, ConfigError

    try:
        return Config.from_settings(settings)  # a plain mapping: the CLI does not import Scrapy
    except ConfigError as exc:
        raise SystemExit(f"scrapy-neardup: {exc}") from None


class AtomicOutput:
    """A file written beside its destination and renamed over it only by :meth:`commit`: a run that fails
    leaves an existing output as it was (``-`` writes to stdout, as it goes)."""

    def __init__(self, path: str) -> None:
        self.path = path
        if path != "-" and os.path.isdir(path):
            raise OSError(21, "is a directory, not a file", path)
        if path == "-":
            self.file = sys.stdout
            self._temporary = None
        else:
            directory = os.path.dirname(os.path.abspath(path))
            try:
                fd, self._temporary = tempfile.mkstemp(
                    prefix=f".{os.path.basename(path)}.", suffix=".part", dir=directory
                )
            except OSError as exc:  # name the output the user gave, not the temporary file
                raise OSError(exc.errno, f"cannot write there: {exc.strerror}", path) from None
            self.file = os.fdopen(fd, "w", encoding="utf-8")

    def commit(self) -> None:
        if self._temporary is not None:
            self.file.close()
            try:
                mode = os.stat(self.path).st_mode & 0o7777  # keep the mode of the file it replaces
            except FileNotFoundError:
                umask = os.umask(0)
                os.umask(umask)
                mode = 0o666 & ~umask  # what open() would have given a new file
            os.chmod(self._temporary, mode)
            os.replace(self._temporary, self.path)
            self._temporary = None

    def discard(self) -> None:
        if self._temporary is not None:
            self.file.close()
            os.unlink(self._temporary)
            self._temporary = None


class StopRequest:
    """Within its ``with`` block, the first Ctrl-C asks the run to stop after the document at hand (the
    outputs and the store then agree on what was decided); a second one interrupts at once."""

    def __init__(self) -> None:
        self._requested = False
        self._previous: Any = None

    def requested(self) -> bool:
        return self._requested

    def _handle(self, signum: int, frame: Any) -> None:
        if self._requested:
            raise KeyboardInterrupt
        self._requested = True
        print("\nscrapy-neardup: stopping after the documents at hand (Ctrl-C again to abort)", file=sys.stderr)

    def __enter__(self) -> StopRequest:
        import signal

        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        signal.signal(signal.SIGINT, self._previous)


def existing_store(args: argparse.Namespace):
    """The store ``args.store_url`` names, opened whatever parameters it was written with (nothing is
    created): for ``store`` and ``rules``."""
    url = args.store_url
    scheme = url.split(":", 1)[0].lower()
    if scheme in REDIS_SCHEMES and args.redis_key is None and args.spider is None:
        raise SystemExit(
            "scrapy-neardup: a Redis store holds each spider's index under its own keys: "
            "pass --spider NAME, or --redis-key PREFIX as NEARDUP_REDIS_KEY names it"
        )
    config = config_of(
        {
            "NEARDUP_ENABLED": True,
            "NEARDUP_STORE_URL": url,
            **({"NEARDUP_REDIS_KEY": args.redis_key} if args.redis_key is not None else {}),
        }
    )
    store = build_store(config, args.spider or "", data_dir=".scrapy")
    store.open_existing()
    return store
