"""``scrapy-neardup store``: count, show, remove, expire and purge a crawl's records."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import config_of, existing_store

_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """Seconds in an age such as ``3600``, ``90m``, ``12h`` or ``30d``."""
    unit = _AGE_UNITS.get(text[-1:].lower()) if text else None
    number = text[:-1] if unit else text
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        raise SystemExit(
            f"scrapy-neardup: --older-than {text!r}: an age is seconds, or a number with s, m, h or d (30d)"
        ) from None
    if not seconds > 0:
        raise SystemExit(f"scrapy-neardup: --older-than {text!r}: an age must be above zero")
    return seconds


def parse_date(text: str) -> float:
    """Unix seconds of an ISO 8601 date or date and time; UTC unless it names a time zone."""
    from datetime import datetime, timezone

    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(
            f"scrapy-neardup: --before {text!r} is not an ISO 8601 date (2026-11-01 or 2026-11-01T12:00:00+01:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _iso(seconds: float | None) -> str | None:
    from datetime import datetime, timezone

    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _record_json(key: str, record: Any, why: dict[str, Any] | None = None) -> str:
    """One line of ``store show`` and ``store export``; ``why``: what the store says of a URL it does not
    hold (:class:`_UnknownUrls`)."""
    status = (
        "unknown"
        if record is None
        else "orphaned"
        if record.orphaned
        else "canonical"
        if record.canonical is None
        else "near-duplicate"
    )
    line = {
        "url": key,
        "status": status,
        "canonical": None if record is None else record.canonical,
        "similarity": None if record is None or record.canonical is None else round(record.similarity, 6),
        "last_seen": None if record is None else _iso(record.seen),
    }
    if why:
        line.update(why)
    return json.dumps(line, ensure_ascii=False)


class _UnknownUrls:
    """Why a store holds no record of a URL a crawl met: it was called soft-404 (named in a crawl's books,
    the newest first), or the URL rules of its host predict it away (the rules, their counts, and the URL
    decided before that it becomes). ``None``: the store knows nothing of it."""

    def __init__(self, store: Any) -> None:
        from ...assembly import build_rule_book
        from ...engine.urlrules import Learner
        from ...store.base import group_of

        self.store = store
        self.soft404 = {}
        self.predicted = {}
        for books in store.books.read():  # oldest first: the newest verdict wins
            for page in books.soft404_pages:
                self.soft404[page.url] = (page, books.started)
            for kept in books.predicted_pages:
                self.predicted[kept.url] = (kept, books.started)
        book = build_rule_book(config_of({}))
        self.rules = Learner(
            book, store.rules, lambda url: group_of(store, url), sync_every=1 << 30, sync_secs=float("inf")
        )

    def __call__(self, url: str) -> dict[str, Any] | None:
        from ...engine.urlrules import host_of

        if url in self.soft404:
            page, when = self.soft404[url]
            return {
                "status": "soft404",
                "answered": page.answered,
                "similarity": page.similarity,
                "crawl_started": _iso(when),
            }
        counts = self.rules.book.counts.get(host_of(url), {})
        if url in self.predicted:  # what a crawl predicted when it kept the request from the fetch
            kept, when = self.predicted[url]
            becomes, group, names, extra = kept.becomes, kept.group, kept.rules, {"crawl_started": _iso(when)}
        else:  # what the rules the store holds now predict
            prediction = self.rules.predict(url)
            if prediction is None or not prediction.decided:
                return None
            becomes, group, names, extra = prediction.target, prediction.group, prediction.rules, {}
        return {
            "status": "predicted",
            "becomes": becomes,
            "group": group,
            "rules": [
                {"rule": name, "successes": counts[name][0], "failures": counts[name][1]}
                for name in names
                if name in counts
            ],
            **extra,
        }


def _urls_to_remove(args: argparse.Namespace) -> list[str]:
    urls = list(args.urls)
    if args.from_file:
        source = sys.stdin if args.from_file == "-" else open(args.from_file, encoding="utf-8")  # noqa: SIM115
        with source:
            urls += [line.strip() for line in source if line.strip()]
    if not urls:
        raise SystemExit("scrapy-neardup: store remove: name the URLs to remove, or --from FILE")
    return urls


def cmd_store(args: argparse.Namespace) -> int:
    """``store STORE_URL ACTION``: a store opened whatever parameters it was written with; nothing is created."""
    import time

    from ...store import redact_url

    url = args.store_url
    before = (
        parse_date(args.before)
        if getattr(args, "before", None)
        else (time.time() - parse_age(args.older_than) if getattr(args, "older_than", None) else None)
    )
    urls = _urls_to_remove(args) if args.action == "remove" else []
    store = existing_store(args)
    try:
        if args.action == "count":
            print(store.count())
        elif args.action == "show":
            explain_unknown = _UnknownUrls(store)
            for key in args.urls:
                record = store.get(key)
                print(_record_json(key, record, None if record is not None else explain_unknown(key)))
        elif args.action == "export":
            for record in store.iter_records():
                print(_record_json(record.key, record))
        elif args.action == "purge":
            started = time.monotonic()
            orphans = store.purge()
            print(
                f"purged {redact_url(url)}: {orphans} orphaned near-duplicates deleted, index entries of removed "
                f"documents dropped, in {time.monotonic() - started:.1f} s; {store.count()} documents held"
            )
        else:
            held = store.count()
            if args.action == "remove":
                removed = store.remove(urls)
                what = f"removed {removed} of the {len(urls)} URLs given ({len(urls) - removed} were not stored)"
            else:
                assert before is not None
                removed = store.expire(before)
                what = f"expired {removed} of {held} documents not fetched since {_iso(before)}"
            purged = ""
            if removed and not args.no_purge:
                purged = f"; purged, {store.purge()} orphaned near-duplicates deleted with them"
            print(f"{what}{purged}; {store.count()} documents held")
    finally:
        store.close()
    return 0
