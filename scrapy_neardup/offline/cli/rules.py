"""``scrapy-neardup rules`` and ``report``: the URL rules a crawl learned, and an HTML report of its store."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import AtomicOutput, config_of, existing_store, tsv_field


def dud_rules(rules: list[tuple[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Rules in duplicate-url-discarder's format (its ``queryRemoval``, ``subpathRemoval`` and ``normalizer``
    processors, each limited to its host by ``urlPattern``), and the names of those it cannot express (an
    ``http`` to ``https`` rewrite, a last path segment, an index page)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    left: list[str] = []
    for host, rule in rules:
        if rule.kind == "param":
            entry = out.setdefault(
                (host, "queryRemoval", host),
                {"args": [], "order": 100, "processor": "queryRemoval", "urlPattern": {"include": [host]}},
            )
            entry["args"].append(rule.arg)
        elif rule.kind == "prefix":
            pattern = f"{host}/{rule.arg}/"
            out[(host, "subpathRemoval", pattern)] = {
                "args": [0],
                "order": 100,
                "processor": "subpathRemoval",
                "urlPattern": {"include": [pattern]},
            }
        elif rule.kind in ("www", "slash"):
            out[(host, "normalizer", host)] = {
                "args": [],
                "order": 100,
                "processor": "normalizer",
                "urlPattern": {"include": [host]},
            }
        else:
            left.append(f"{host} {rule.name}")
    return list(out.values()), left


def cmd_rules(args: argparse.Namespace) -> int:
    """``rules STORE_URL``: the URL rules of a crawl's store."""
    from ...engine.urlrules import RuleBook, read_dud_rules

    store = existing_store(args)
    try:
        counts = store.rules.read()
    finally:
        store.close()
    curated = None
    if args.rules_file:
        try:
            with open(args.rules_file, encoding="utf-8") as f:
                curated = read_dud_rules(f.read(), args.rules_file)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise SystemExit(f"scrapy-neardup: --rules-file: {exc}") from None
    book = RuleBook(args.min_support, args.min_confidence, args.prior_hosts, args.prior_support, curated=curated)
    book.merge(counts)
    rows = [row for row in book.listing() if args.all or row[3]]
    # The hand-written rules, apart: with the counts the crawl kept of them on their domain's own host.
    hand = [
        (domain, rule, book.count_of(domain, rule), rule in book.confident(domain))
        for domain, domain_rules in sorted((curated.rules if curated else {}).items())
        for rule in domain_rules
    ]
    output = AtomicOutput(args.output)
    out = output.file
    try:
        if args.format == "json":
            out.write(
                json.dumps(
                    [
                        {
                            "host": host,
                            "rule": rule.name,
                            "successes": count.successes,
                            "failures": count.failures,
                            "confidence": round(count.confidence, 4),
                            "confident": confident,
                            "source": source,
                            "why_unused": "" if confident or source == "file" else book.why_unused(host, rule),
                        }
                        for source, table in (("learned", rows), ("file", hand))
                        for host, rule, count, confident in table
                    ],
                    indent=1,
                )
                + "\n"
            )
        elif args.format == "dud":
            rules, left = dud_rules([(host, rule) for host, rule, _, _ in rows])
            out.write(json.dumps(rules, indent=2) + "\n")
            for name in left:
                print(
                    f"scrapy-neardup: {name}: duplicate-url-discarder has no processor for it; left out",
                    file=sys.stderr,
                )
        else:
            out.write("host\trule\tsuccesses\tfailures\tconfidence\tused\twhy unused\n")
            for host, rule, count, confident in rows:
                out.write(
                    f"{tsv_field(host)}\t{tsv_field(rule.name)}\t{count.successes}\t{count.failures}\t"
                    f"{count.confidence:.4f}\t{'yes' if confident else 'no'}\t"
                    f"{'' if confident else book.why_unused(host, rule)}\n"
                )
            for host, rule, count, used in hand:
                out.write(
                    f"{tsv_field(host)}\t{tsv_field(rule.name)}\t{count.successes}\t{count.failures}\t"
                    f"{count.confidence:.4f}\t{'file' if used else 'no'}\t\n"
                )
    except BaseException:
        output.discard()
        raise
    output.commit()
    if not rows and not hand:
        print(
            f"scrapy-neardup: no {'' if args.all else 'confident '}URL rule in {len(counts)} rules of the store",
            file=sys.stderr,
        )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """``report STORE_URL -o FILE``: the HTML report of a crawl's store."""
    from ...store import redact_url
    from ..report import collect, render

    store = existing_store(args)
    try:
        params = store.read_meta() or {}
        data = collect(
            redact_url(args.store_url), store.iter_records(), store.rules.read(), store.books.read(), config_of({})
        )
    finally:
        store.close()
    note = ", ".join(f"{k} {v}" for k, v in sorted(params.items()) if not k.startswith("_"))
    output = AtomicOutput(args.output)
    try:
        output.file.write(render(data, f"Store parameters: {note}." if note else ""))
    except BaseException:
        output.discard()
        raise
    output.commit()
    print(
        f"scrapy-neardup: {data.documents} pages, {data.duplicates} near-duplicates in {len(data.groups)} groups, "
        f"{len(data.rules)} URL rules: {args.output}",
        file=sys.stderr,
    )
    return 0
