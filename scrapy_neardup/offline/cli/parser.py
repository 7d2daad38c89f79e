"""The command line: every subcommand's options, and the settings they stand for."""

from __future__ import annotations

import argparse
from typing import Any

from ..._version import __version__
from ...engine.algorithms import algorithm_names
from ...engine.cluster import CLUSTER_MODES
from ...settings import BY_NAME, default_of


def settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"NEARDUP_ENABLED": True}
    for option, name in [
        ("algorithm", "NEARDUP_ALGORITHM"),
        ("threshold", "NEARDUP_THRESHOLD"),
        ("num_perm", "NEARDUP_MINHASH_NUM_PERM"),
        ("seed", "NEARDUP_MINHASH_SEED"),
        ("sketch", "NEARDUP_MINHASH_SKETCH"),
        ("shingle_size", "NEARDUP_SHINGLE_SIZE"),
        ("max_distance", "NEARDUP_SIMHASH_MAX_DISTANCE"),
        ("min_text_length", "NEARDUP_MIN_TEXT_LENGTH"),
        ("template_repeats", "NEARDUP_TEMPLATE_REPEATS"),
        ("lexicon", "NEARDUP_IMATCH_LEXICON"),
    ]:
        value = getattr(args, option, None)
        if value is not None:
            settings[name] = value
    if getattr(args, "no_extract", False):
        settings["NEARDUP_EXTRACT"] = False
    if getattr(args, "extractor", None):
        settings["NEARDUP_EXTRACTOR"] = args.extractor
    if getattr(args, "extract_fast", False):
        settings["NEARDUP_EXTRACT_FAST"] = True
    if getattr(args, "extract_favor", None):
        settings["NEARDUP_EXTRACT_FAVOR"] = args.extract_favor
    if getattr(args, "max_body_size", None) is not None:
        settings["NEARDUP_MAX_BODY_SIZE"] = args.max_body_size
    for option, name in [
        ("store", "NEARDUP_STORE_URL"),
        ("store_class", "NEARDUP_STORE_CLASS"),
        ("redis_key", "NEARDUP_REDIS_KEY"),
    ]:
        if getattr(args, option, None) is not None:
            settings[name] = getattr(args, option)
    return settings


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number} is not allowed: at least 1")
    return number


def _add_algorithm_options(parser: argparse.ArgumentParser) -> None:
    """The options that stand for settings: their choices and defaults are the settings table's."""

    group = parser.add_argument_group("algorithm (defaults as in the Scrapy settings)")
    group.add_argument("--algorithm", choices=algorithm_names(), help=f"default: {default_of('NEARDUP_ALGORITHM')}")
    group.add_argument("--lexicon", help="I-Match lexicon file (with --algorithm imatch)")
    group.add_argument(
        "--threshold",
        type=float,
        help="Jaccard similarity threshold, one scale for every algorithm (default: each algorithm's own, "
        "0.45 for minhash, 0.9 for simhash)",
    )
    group.add_argument(
        "--num-perm", type=int, help=f"MinHash permutations (default: {default_of('NEARDUP_MINHASH_NUM_PERM')})"
    )
    group.add_argument("--seed", type=int, help=f"MinHash seed (default: {default_of('NEARDUP_MINHASH_SEED')})")
    group.add_argument(
        "--sketch",
        choices=BY_NAME["NEARDUP_MINHASH_SKETCH"].allowed_choices,
        help="how MinHash draws its minima: one permutation with densification, or num_perm "
        f"permutations (default: {default_of('NEARDUP_MINHASH_SKETCH')})",
    )
    group.add_argument("--shingle-size", type=int, help="words per shingle (default: 2; 1 for imatch and exact)")
    group.add_argument("--max-distance", type=int, help="SimHash Hamming distance (default: from --threshold)")
    group.add_argument(
        "--min-text-length",
        type=int,
        help=f"shortest text fingerprinted, in characters (default: {default_of('NEARDUP_MIN_TEXT_LENGTH')})",
    )
    group.add_argument(
        "--template-repeats",
        type=int,
        help="pages of one host with the same main text and different page texts from which "
        f"it is taken as template and the page text used instead; 0: off (default: "
        f"{default_of('NEARDUP_TEMPLATE_REPEATS')})",
    )
    group.add_argument(
        "--no-extract", action="store_true", help="fingerprint the whole page text, not the main content"
    )
    group.add_argument(
        "--extractor",
        choices=BY_NAME["NEARDUP_EXTRACTOR"].allowed_choices,
        help=f"what finds a page's main content (default: {default_of('NEARDUP_EXTRACTOR')})",
    )
    group.add_argument("--extract-fast", action="store_true", help="trafilatura's fast mode (no fallback extractors)")
    group.add_argument(
        "--extract-favor",
        choices=BY_NAME["NEARDUP_EXTRACT_FAVOR"].allowed_choices,
        help="what trafilatura favours when unsure: more text or less "
        f"(default: {default_of('NEARDUP_EXTRACT_FAVOR')})",
    )


def _add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """The store a command reads: its URL, and for Redis the spider or key prefix of its index."""
    parser.add_argument("store_url", metavar="STORE_URL", help="as NEARDUP_STORE_URL: sqlite:///path, redis://...")
    parser.add_argument("--spider", help="the spider whose Redis index to use (the %%(spider)s of --redis-key)")
    parser.add_argument(
        "--redis-key", help="the Redis key prefix, as NEARDUP_REDIS_KEY (default: neardup:{%%(spider)s})"
    )


def _spark_property(value: str) -> tuple[str, str]:
    key, sep, setting = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return key.strip(), setting


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scrapy-neardup",
        description="Near-duplicate detection for web crawls: the scrapy-neardup engine, offline.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    dedup = sub.add_parser(
        "dedup",
        help="find near-duplicate pairs in crawl dumps (JSONL, WARC)",
        description="Find near-duplicate pairs in JSONL ({url, html} or {url, text}) and WARC/WARC.gz files.",
    )
    dedup.add_argument("inputs", nargs="+", metavar="INPUT", help="JSONL(.gz) or WARC(.gz) files")
    dedup.add_argument("-o", "--output", required=True, help="pairs file: url_a<TAB>url_b<TAB>similarity ('-': stdout)")
    dedup.add_argument(
        "--all-pairs",
        action="store_true",
        help="write every pair of documents at or above the threshold (Broder's output), not "
        "each near-duplicate against its canonical only; costs memory and time that grow "
        "with the square of the largest group",
    )
    dedup.add_argument("--clusters", metavar="FILE", help="also write the clusters as JSON lines")
    dedup.add_argument(
        "--only-new",
        action="store_true",
        help="write only the pairs of documents new to the store (a rerun on a persistent store "
        "otherwise writes the pairs of the documents it knows, from the store)",
    )
    dedup.add_argument(
        "--warc-reader",
        choices=("auto", "fastwarc", "warcio"),
        default="auto",
        help="the WARC reader: FastWARC where installed (auto, the default), or warcio; ARC files "
        "are always read with warcio",
    )
    dedup.add_argument(
        "--allow-truncated",
        action="store_true",
        help="a file cut short (a .warc.gz or .jsonl.gz ending inside a record) is used up to its last complete "
        "record, said in a WARNING and listed in the summary's 'truncated', instead of failing the run",
    )
    dedup.add_argument(
        "--allow-empty",
        action="store_true",
        help="an input with no readable document is not an error: empty outputs, exit status 0",
    )
    dedup.add_argument(
        "--cluster-mode",
        choices=CLUSTER_MODES,
        default=CLUSTER_MODES[0],
        help="strict: every member resembles the canonical; components: connected components (default: strict)",
    )
    dedup.add_argument("--store", default="memory://", help="store URL, as NEARDUP_STORE_URL (default: memory://)")
    dedup.add_argument(
        "--store-class",
        metavar="PATH",
        help="a store backend of your own, as NEARDUP_STORE_CLASS (package.module.Class)",
    )
    dedup.add_argument(
        "--spider",
        default="dedup",
        help="the spider name the store's Redis keys are made from, as a crawl's (default: dedup)",
    )
    dedup.add_argument(
        "--redis-key", metavar="PREFIX", help="Redis key prefix, as NEARDUP_REDIS_KEY (default: neardup:{%%(spider)s})"
    )
    dedup.add_argument("--reset", action="store_true", help="empty the store first")
    dedup.add_argument(
        "--workers", type=_positive_int, help="processes for extraction and fingerprinting (default: CPUs)"
    )
    dedup.add_argument(
        "--max-body-size",
        type=_positive_int,
        metavar="BYTES",
        help="JSON lines and WARC records larger than this are passed over, counted in the summary's "
        "skipped too_large (default: 2097152, as NEARDUP_MAX_BODY_SIZE)",
    )
    dedup.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress line on stderr (default: when stderr is a terminal)",
    )
    spark = dedup.add_argument_group(
        "Spark", "run on Apache Spark instead of this machine's processes (pip install 'scrapy-neardup[spark]')"
    )
    spark.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="local: this machine's processes (default); spark: a Spark job (inputs may then be hdfs://, s3a:// "
        "and other paths Spark reads)",
    )
    spark.add_argument(
        "--spark-master",
        metavar="URL",
        help="the Spark master (local[N], local-cluster[N,C,MB], spark://..., yarn; default: what spark-submit "
        "gave, else local[*])",
    )
    spark.add_argument(
        "--spark-conf",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        type=_spark_property,
        help="a Spark property, as spark-submit's --conf (repeatable)",
    )
    spark.add_argument(
        "--partitions",
        type=_positive_int,
        help="partitions the documents are spread over for extraction (default: twice the default parallelism)",
    )
    spark.add_argument(
        "--parquet",
        metavar="DIR",
        help="also write the pairs and clusters as Parquet, in DIR/pairs and DIR/clusters (DIR must not exist)",
    )
    _add_algorithm_options(dedup)

    evaluate = sub.add_parser(
        "evaluate",
        help="precision/recall/F1 on a labelled set (neardup-dev manifest)",
        description="Run the engine over a labelled set and score it pairwise.",
    )
    evaluate.add_argument("manifest", help="manifest.jsonl: id, url, file, cluster, kind per page")
    evaluate.add_argument("--all", action="store_true", help="every algorithm, each with its defaults")
    evaluate.add_argument("--workers", type=_positive_int, help="processes for extraction (default: CPUs)")
    evaluate.add_argument("--limit", type=int, help="only the first N pages")
    evaluate.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    evaluate.add_argument("--allow-empty", action="store_true", help="a manifest of no page is not an error")
    evaluate.add_argument("--pairs", metavar="FILE", help="write the predicted pairs (the last configuration)")
    evaluate.add_argument(
        "--judged",
        metavar="PAIRS.tsv",
        help="also score on pairs you judged: url_a<TAB>url_b<TAB>1 (near-duplicates) or 0 (not)",
    )
    evaluate.add_argument(
        "--errors",
        metavar="FILE",
        help="write the false merges and missed pages as JSON lines (the last configuration)",
    )
    _add_algorithm_options(evaluate)

    lexicon = sub.add_parser(
        "lexicon",
        help="build an I-Match lexicon (terms of mid-range idf) from a collection",
        description="Write the terms whose idf lies between two quantiles, one per line.",
    )
    lexicon.add_argument("inputs", nargs="+", metavar="INPUT", help="JSONL(.gz) or WARC(.gz) files")
    lexicon.add_argument("-o", "--output", required=True)
    lexicon.add_argument("--low", type=float, default=0.1, help="lowest idf quantile kept (default 0.1)")
    lexicon.add_argument("--high", type=float, default=0.9, help="highest idf quantile kept (default 0.9)")
    lexicon.add_argument("--min-df", type=int, default=2, help="terms in fewer documents are dropped (default 2)")
    lexicon.add_argument("--no-extract", action="store_true", help="use the whole page text, not the main content")

    store = sub.add_parser(
        "store",
        help="look into a store and remove or age its records",
        description="Maintenance of a crawl's store (a recurring crawl's, mostly): count its "
        "documents, show a URL's record, remove URLs, expire records not seen "
        "since a date. Nothing else may use a SQLite store meanwhile.",
    )
    _add_store_arguments(store)
    actions = store.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("count", help="print the number of documents held")
    actions.add_parser("export", help="print every record as JSON lines (as show does), oldest first")
    show = actions.add_parser("show", help="print the records of URLs as JSON lines")
    show.add_argument("urls", nargs="+", metavar="URL")
    remove = actions.add_parser(
        "remove", help="forget URLs (their near-duplicates are checked afresh when fetched again)"
    )
    remove.add_argument("urls", nargs="*", metavar="URL")
    remove.add_argument("--from", dest="from_file", metavar="FILE", help="URLs to remove, one per line ('-': stdin)")
    expire = actions.add_parser("expire", help="forget the documents not fetched since a date")
    when = expire.add_mutually_exclusive_group(required=True)
    when.add_argument("--before", metavar="DATE", help="ISO 8601 date or date and time (UTC unless it says)")
    when.add_argument("--older-than", metavar="AGE", help="an age: seconds, or a number with s, m, h or d (30d)")
    for action in (remove, expire):
        action.add_argument(
            "--no-purge",
            action="store_true",
            help="leave the removed documents' index entries and orphaned near-duplicates for "
            "a later purge (the purge is a pass over the whole store)",
        )
    actions.add_parser("purge", help="delete what removals left behind: index entries and orphaned near-duplicates")

    rules = sub.add_parser(
        "rules",
        help="list the URL rules a crawl learned, and export them",
        description="The URL rules learned from a crawl's verdicts (NEARDUP_URL_RULES) and kept in its store: "
        "for each host, the rewrites that led to a page met before, with their successes and failures.",
    )
    _add_store_arguments(rules)
    rules.add_argument("--all", action="store_true", help="every rule, not only those a crawl would use")
    for flag, setting, kind in (
        ("--min-support", "NEARDUP_URL_RULES_MIN_SUPPORT", _positive_int),
        ("--min-confidence", "NEARDUP_URL_RULES_CONFIDENCE", float),
        ("--prior-hosts", "NEARDUP_URL_RULES_PRIOR_HOSTS", int),
        ("--prior-support", "NEARDUP_URL_RULES_PRIOR_SUPPORT", _positive_int),
    ):
        rules.add_argument(
            flag, type=kind, default=default_of(setting), help=f"as {setting} (default: {default_of(setting)})"
        )
    rules.add_argument(
        "--format",
        choices=("table", "json", "dud"),
        default="table",
        help="a table; JSON; or the rule files of duplicate-url-discarder (DUD_LOAD_RULE_PATHS) (default: table)",
    )
    rules.add_argument(
        "--rules-file",
        metavar="FILE",
        help="as NEARDUP_URL_RULES_FILE: list its hand-written rules too, apart (used: 'file', or 'no' once "
        "retired on that host)",
    )
    rules.add_argument("-o", "--output", default="-", help="write here instead of stdout")

    report = sub.add_parser(
        "report",
        help="an HTML report of a crawl's duplicates, from its store",
        description="One self-contained HTML file (no script, nothing fetched when it opens) of what a crawl's "
        "store holds: per host the share of duplicate fetches and the fetches saved, the largest groups, the "
        "URL patterns behind the duplicates, the learned rules, the soft-404 hosts, the similarities.",
    )
    _add_store_arguments(report)
    report.add_argument("-o", "--output", required=True, help="the HTML file to write ('-': stdout)")

    tune = sub.add_parser(
        "tune",
        help="LSH bands x rows for a threshold, with error probabilities",
        description="Show the MinHash LSH banding chosen for a threshold.",
    )
    tune.add_argument("--threshold", type=float, required=True)
    tune.add_argument("--num-perm", type=int, default=128)
    tune.add_argument("--plot", metavar="FILE.png", help="draw the S-curve (needs matplotlib: the 'plot' extra)")
    return parser
