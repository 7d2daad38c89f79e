"""The ``scrapy-neardup`` command: the plugin's engine and stores, offline.

scrapy-neardup dedup INPUT... -o PAIRS.tsv        near-duplicate pairs of crawl dumps (JSONL, WARC)
scrapy-neardup evaluate MANIFEST                  precision/recall/F1 on a labelled set
scrapy-neardup tune --threshold T                 the LSH bands x rows for a threshold
scrapy-neardup lexicon INPUT... -o LEXICON.txt    an I-Match lexicon from a collection
scrapy-neardup store STORE_URL count|show|remove|expire|purge
                                                  a crawl's store: look up, remove and age records
scrapy-neardup rules STORE_URL [--format table|json|dud]
                                                  the URL rules a crawl learned
scrapy-neardup report STORE_URL -o REPORT.html    an HTML report of a crawl's duplicates
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

from .._version import __version__
from ..assembly import build_algorithm, build_pipeline, build_store
from ..engine.algorithms import algorithm_names
from ..engine.cluster import CLUSTER_MODES
from ..settings import BY_NAME, default_of
from ..store import REDIS_SCHEMES


def _settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
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


#: Characters a URL may carry (from a hostile or broken dump) that would break a line of the TSV output.
_TSV_ESCAPES = str.maketrans({"\t": "%09", "\n": "%0A", "\r": "%0D"})


def tsv_field(url: str) -> str:
    """A URL as one TSV field: tabs and line breaks percent-encoded, as a browser sends them."""
    return url.translate(_TSV_ESCAPES)


def _config(settings: dict[str, Any]):
    from ..settings import Config, ConfigError

    try:
        return Config.from_settings(settings)  # a plain mapping: the CLI does not import Scrapy
    except ConfigError as exc:
        raise SystemExit(f"scrapy-neardup: {exc}") from None


def _add_algorithm_options(parser: argparse.ArgumentParser) -> None:
    """The options that stand for settings: their choices and defaults are the settings table's."""

    group = parser.add_argument_group("algorithm (defaults as in the Scrapy settings)")
    group.add_argument("--algorithm", choices=algorithm_names(), help=f"default: {default_of('NEARDUP_ALGORITHM')}")
    group.add_argument("--lexicon", help="I-Match lexicon file (with --algorithm imatch)")
    group.add_argument(
        "--threshold",
        type=float,
        help="Jaccard similarity threshold, one scale for every algorithm (default: each algorithm's own, "
        "0.45 for minhash, 0.65 for simhash)",
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
    rules.add_argument(
        "--min-support",
        type=_positive_int,
        default=default_of("NEARDUP_URL_RULES_MIN_SUPPORT"),
        help=f"as NEARDUP_URL_RULES_MIN_SUPPORT (default: {default_of('NEARDUP_URL_RULES_MIN_SUPPORT')})",
    )
    rules.add_argument(
        "--min-confidence",
        type=float,
        default=default_of("NEARDUP_URL_RULES_CONFIDENCE"),
        help=f"as NEARDUP_URL_RULES_CONFIDENCE (default: {default_of('NEARDUP_URL_RULES_CONFIDENCE')})",
    )
    rules.add_argument(
        "--prior-hosts",
        type=int,
        default=default_of("NEARDUP_URL_RULES_PRIOR_HOSTS"),
        help=f"as NEARDUP_URL_RULES_PRIOR_HOSTS (default: {default_of('NEARDUP_URL_RULES_PRIOR_HOSTS')})",
    )
    rules.add_argument(
        "--prior-support",
        type=_positive_int,
        default=default_of("NEARDUP_URL_RULES_PRIOR_SUPPORT"),
        help=f"as NEARDUP_URL_RULES_PRIOR_SUPPORT (default: {default_of('NEARDUP_URL_RULES_PRIOR_SUPPORT')})",
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


class _StopRequest:
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

    def __enter__(self) -> _StopRequest:
        import signal

        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        signal.signal(signal.SIGINT, self._previous)


def _nothing_read(inputs: list[str], unreadable: int, too_large: int, not_html: int, not_ok: int) -> str:
    """The one line of a run that read no document: what the input held instead."""
    held = [
        f"{n} {what}"
        for n, what in (
            (unreadable, "unreadable lines"),
            (too_large, "lines or records over --max-body-size"),
            (not_html, "WARC records that are not HTML responses"),
            (not_ok, "HTML responses whose status is not 2xx"),
        )
        if n
    ]
    return (
        f"no document read from {', '.join(inputs)}"
        + (f" ({', '.join(held)})" if held else " (empty)")
        + "; nothing written (pass --allow-empty to write empty outputs and exit 0)"
    )


def cmd_dedup(args: argparse.Namespace) -> int:
    from ..engine.cluster import clusters
    from .batch import BatchDeduplicator, BatchStats, Progress
    from .inputs import DocumentReader, InputError, check_inputs

    config = _config(_settings_from_args(args))
    check_inputs(args.inputs)
    reader = DocumentReader(
        args.inputs,
        raw_lines=True,
        max_size=config.max_body_size,
        warc_reader=args.warc_reader,
        allow_truncated=args.allow_truncated,
    )
    # Every output is opened before the work: a bad path must not be found after a persistent store has
    # already filed every page (a rerun would then find them all seen, and the pairs would be lost).
    outputs = [AtomicOutput(args.output)]
    try:
        if args.clusters:
            outputs.append(AtomicOutput(args.clusters))
    except OSError:
        outputs[0].discard()
        raise
    out = outputs[0].file
    edges: list[tuple[str, str]] = []
    keep_edges = bool(args.clusters)

    all_pairs = None
    if args.all_pairs:
        from .allpairs import AllPairs

        all_pairs = AllPairs(build_algorithm(config))

    def on_fingerprint(key, fp):
        assert all_pairs is not None
        for other, similarity in all_pairs.add(key, fp.signature, fp.buckets):
            out.write(f"{tsv_field(key)}\t{tsv_field(other)}\t{similarity:.4f}\n")

    def on_verdict(verdict):
        # A document known from an earlier run is *seen*; its pair comes from the store, so that a rerun over
        # the same input writes the same pairs (--only-new: the pairs of documents new in this run only).
        if verdict.displaced is not None:
            # A better copy took its group: the group's former page is its near-duplicate now.
            if all_pairs is None:
                out.write(f"{tsv_field(verdict.displaced)}\t{tsv_field(verdict.key)}\t{verdict.similarity:.4f}\n")
            if keep_edges:
                edges.append((verdict.displaced, verdict.key))
                if args.cluster_mode == "components":
                    edges.extend((verdict.key, other) for other in verdict.also)
        elif verdict.status == "duplicate" or (verdict.is_duplicate and not args.only_new):
            if all_pairs is None:
                out.write(f"{tsv_field(verdict.key)}\t{tsv_field(verdict.canonical)}\t{verdict.similarity:.4f}\n")
            if keep_edges:
                edges.append((verdict.key, verdict.canonical))
                if args.cluster_mode == "components":
                    edges.extend((verdict.key, other) for other in verdict.also)

    stop = _StopRequest()
    stats = BatchStats()
    try:
        runner = BatchDeduplicator(config, args.spider, workers=args.workers, reset=args.reset)
        with stop:
            runner.run(
                reader,
                on_verdict,
                Progress(args.progress, lambda: reader.fraction),
                stats=stats,
                should_stop=stop.requested,
                on_fingerprint=on_fingerprint if all_pairs is not None else None,
            )
        if stats.documents == 0 and not args.allow_empty and not stop.requested():
            # An output with no pairs would read "no near-duplicates" in a pipeline: it is not written.
            raise InputError(
                _nothing_read(args.inputs, reader.errors, reader.too_large, reader.passed_over, reader.not_ok)
            )
        if args.clusters:
            for members in clusters(edges, args.cluster_mode):
                outputs[1].file.write(
                    json.dumps({"canonical": members[0], "members": members, "size": len(members)}) + "\n"
                )
        for output in outputs:
            output.commit()
    finally:
        for output in outputs:
            output.discard()
    skipped = dict(stats.skipped)
    if reader.too_large:
        skipped["too_large"] = skipped.get("too_large", 0) + reader.too_large
    summary = {
        "documents": stats.documents,
        "unique": stats.unique,
        "duplicate": stats.duplicate,
        "seen": stats.seen,
        "skipped": skipped,
        "unreadable": reader.errors,
        "not_html_records": reader.passed_over,
        "not_2xx_responses": reader.not_ok,
        "seconds": round(stats.seconds, 3),
    }
    if reader.truncated:
        summary["truncated"] = reader.truncated
    if stop.requested():
        summary["interrupted"] = True
        print(
            f"scrapy-neardup: interrupted after {stats.documents} documents: "
            f"{' and '.join(o.path for o in outputs)} hold the pairs and clusters of those, as the store does; "
            "the rest of the input was not read",
            file=sys.stderr,
        )
    print(json.dumps(summary), file=sys.stderr)
    return 130 if stop.requested() else 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluation import load_manifest
    from .inputs import InputError

    if not load_manifest(args.manifest) and not args.allow_empty:
        raise InputError(f"{args.manifest}: no page in the manifest; nothing scored (pass --allow-empty to exit 0)")

    with tempfile.TemporaryDirectory(prefix="neardup-evaluate-") as scratch:  # the lexicon I-Match is given
        return _evaluate(args, scratch)


def _evaluate(args: argparse.Namespace, scratch: str) -> int:
    from .evaluation import evaluate_configurations, lexicon_for_manifest

    base = _settings_from_args(args)
    if args.all:
        configurations = []
        for name in algorithm_names():
            settings = {**base, "NEARDUP_ALGORITHM": name}
            if name != base.get("NEARDUP_ALGORITHM", "minhash"):
                for key in ("NEARDUP_THRESHOLD", "NEARDUP_SHINGLE_SIZE", "NEARDUP_SIMHASH_MAX_DISTANCE"):
                    settings.pop(key, None)  # each algorithm with its own defaults
            if name == "imatch" and "NEARDUP_IMATCH_LEXICON" not in settings:
                # As in Chowdhury et al.'s experiments: the lexicon comes from the collection itself.
                settings["NEARDUP_IMATCH_LEXICON"] = lexicon_for_manifest(args.manifest, scratch, args.limit)
            configurations.append((name, settings))
    else:
        name = base.get("NEARDUP_ALGORITHM", "minhash")
        if name == "imatch" and "NEARDUP_IMATCH_LEXICON" not in base:
            base["NEARDUP_IMATCH_LEXICON"] = lexicon_for_manifest(args.manifest, scratch, args.limit)
        configurations = [(name, base)]
    rows = evaluate_configurations(
        args.manifest,
        [(name, _config(settings)) for name, settings in configurations],
        workers=args.workers,
        limit=args.limit,
        pairs_path=args.pairs,
        errors_path=args.errors,
        judged_path=args.judged,
    )
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    kinds = sorted({k for row in rows for k in row["kind_recall"]})
    judged = "judged" in rows[0] if rows else False
    header = [
        "configuration",
        "F1",
        "precision",
        "recall",
        *(f"R:{k}" for k in kinds),
        *(["judged F1", "judged P", "judged R"] if judged else []),
        "ms/page",
    ]
    print(" | ".join(header))
    for row in rows:
        cells = [
            row["name"],
            f"{row['f1']:.4f}",
            f"{row['precision']:.4f}",
            f"{row['recall']:.4f}",
            *(f"{row['kind_recall'].get(k, float('nan')):.3f}" for k in kinds),
            *([f"{row['judged'][m]:.4f}" for m in ("f1", "precision", "recall")] if judged else []),
            f"{row['ms_per_page']:.2f}",
        ]
        print(" | ".join(cells))
    return 0


def cmd_lexicon(args: argparse.Namespace) -> int:
    from ..engine.algorithms.imatch import IMatch
    from ..engine.extract import decode_html
    from .inputs import DocumentReader, check_inputs

    # The text the lexicon is applied to: the crawl's extraction, with the same settings.
    pipeline = build_pipeline(_config({"NEARDUP_ENABLED": True, "NEARDUP_EXTRACT": not args.no_extract}))

    def texts():
        for doc in DocumentReader(args.inputs):
            if doc.html is None:
                yield doc.text
                continue
            html = decode_html(doc.html, doc.content_type) if isinstance(doc.html, bytes) else doc.html
            yield pipeline.text_of(html, doc.url).text

    check_inputs(args.inputs)
    terms = IMatch.build_lexicon(texts(), low=args.low, high=args.high, min_df=args.min_df)
    output = AtomicOutput(args.output)
    try:
        output.file.writelines(t + "\n" for t in terms)
        output.commit()
    finally:
        output.discard()
    print(json.dumps({"terms": len(terms)}), file=sys.stderr)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from ..engine.lsh import candidate_probability, error_areas, optimal_bands

    if not 0 < args.threshold < 1:
        raise SystemExit("scrapy-neardup: --threshold must be between 0 and 1 (exclusive)")
    if not 2 <= args.num_perm <= 1024:
        raise SystemExit("scrapy-neardup: --num-perm must be from 2 to 1024")
    bands, rows = optimal_bands(args.threshold, args.num_perm)
    fp, fn = error_areas(args.threshold, bands, rows)
    print(
        f"threshold {args.threshold}, {args.num_perm} permutations: {bands} bands x {rows} rows "
        f"(S-curve midpoint (1/b)^(1/r) = {(1 / bands) ** (1 / rows):.3f})"
    )
    print(f"false-positive area {fp:.4f}, false-negative area {fn:.4f}")
    print("similarity | P(candidate) | error")
    for s in sorted(
        {
            round(x, 2)
            for x in (
                0.1,
                0.2,
                0.3,
                0.4,
                0.5,
                0.6,
                0.7,
                0.8,
                0.9,
                0.95,
                args.threshold - 0.1,
                args.threshold,
                args.threshold + 0.1,
            )
            if 0 < x < 1
        }
    ):
        p = float(candidate_probability(s, bands, rows))
        kind = "false positive" if s < args.threshold else "false negative"
        err = p if s < args.threshold else 1 - p
        print(f"{s:10.2f} | {p:12.4f} | {err:.4f} {kind}")
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            import numpy as np
        except ImportError:
            raise SystemExit("scrapy-neardup: --plot needs matplotlib: pip install 'scrapy-neardup[plot]'") from None
        xs = np.linspace(0, 1, 401)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(xs, candidate_probability(xs, bands, rows), label=f"LSH {bands}x{rows}")
        ax.step([0, args.threshold, 1], [0, 1, 1], where="post", linestyle="--", label="ideal step")
        ax.set_xlabel("Jaccard similarity")
        ax.set_ylabel("probability of being a candidate")
        ax.set_title(f"threshold {args.threshold}, {args.num_perm} permutations")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot written to {args.plot}")
    return 0


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
        from ..assembly import build_rule_book
        from ..engine.urlrules import Learner
        from ..store.base import group_of

        self.store = store
        self.soft404 = {}
        self.predicted = {}
        for books in store.crawl_books():  # oldest first: the newest verdict wins
            for page in books.soft404_pages:
                self.soft404[page.url] = (page, books.started)
            for kept in books.predicted_pages:
                self.predicted[kept.url] = (kept, books.started)
        book = build_rule_book(_config({}))
        self.rules = Learner(book, store, lambda url: group_of(store, url), sync_every=1 << 30, sync_secs=float("inf"))

    def __call__(self, url: str) -> dict[str, Any] | None:
        from ..engine.urlrules import UrlRule, host_of

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
                {"rule": name, "successes": counts[rule].successes, "failures": counts[rule].failures}
                for name in names
                for rule in [UrlRule.parse(name)]
                if rule in counts
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


def _existing_store(args: argparse.Namespace):
    """The store ``args.store_url`` names, opened whatever parameters it was written with (nothing is
    created): for ``store`` and ``rules``."""
    url = args.store_url
    scheme = url.split(":", 1)[0].lower()
    if scheme in REDIS_SCHEMES and args.redis_key is None and args.spider is None:
        raise SystemExit(
            "scrapy-neardup: a Redis store holds each spider's index under its own keys: "
            "pass --spider NAME, or --redis-key PREFIX as NEARDUP_REDIS_KEY names it"
        )
    config = _config(
        {
            "NEARDUP_ENABLED": True,
            "NEARDUP_STORE_URL": url,
            **({"NEARDUP_REDIS_KEY": args.redis_key} if args.redis_key is not None else {}),
        }
    )
    store = build_store(config, args.spider or "", data_dir=".scrapy")
    store.open_existing()
    return store


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
    from ..engine.urlrules import RuleBook, RuleCount, read_dud_rules

    store = _existing_store(args)
    try:
        counts = store.rule_counts()
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
        (domain, rule, book.counts.get(domain, {}).get(rule, RuleCount()), rule in book.confident(domain))
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
            out.write("host\trule\tsuccesses\tfailures\tconfidence\tused\n")
            for host, rule, count, confident in rows:
                out.write(
                    f"{tsv_field(host)}\t{tsv_field(rule.name)}\t{count.successes}\t{count.failures}\t"
                    f"{count.confidence:.4f}\t{'yes' if confident else 'no'}\n"
                )
            for host, rule, count, used in hand:
                out.write(
                    f"{tsv_field(host)}\t{tsv_field(rule.name)}\t{count.successes}\t{count.failures}\t"
                    f"{count.confidence:.4f}\t{'file' if used else 'no'}\n"
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
    from ..store import redact_url
    from .report import collect, render

    store = _existing_store(args)
    try:
        params = store.read_meta() or {}
        data = collect(
            redact_url(args.store_url), store.iter_records(), store.rule_counts(), store.crawl_books(), _config({})
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


def cmd_store(args: argparse.Namespace) -> int:
    """``store STORE_URL ACTION``: a store opened whatever parameters it was written with; nothing is created."""
    import time

    from ..store import redact_url

    url = args.store_url
    before = (
        parse_date(args.before)
        if getattr(args, "before", None)
        else (time.time() - parse_age(args.older_than) if getattr(args, "older_than", None) else None)
    )
    urls = _urls_to_remove(args) if args.action == "remove" else []
    store = _existing_store(args)
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from ..store.base import StoreError, StoreMismatchError
    from .inputs import InputError

    try:
        commands = {
            "dedup": cmd_dedup,
            "evaluate": cmd_evaluate,
            "tune": cmd_tune,
            "lexicon": cmd_lexicon,
            "store": cmd_store,
            "rules": cmd_rules,
            "report": cmd_report,
        }
        return commands[args.command](args)
    except KeyboardInterrupt:
        print("scrapy-neardup: aborted; existing output files were left as they were", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly, as Unix tools do
        sys.stderr.close()
        return 0
    except StoreMismatchError as exc:
        print(
            f"scrapy-neardup: the store at {exc.location} was written with other parameters "
            f"({'; '.join(exc.differences)}); pass --reset to empty it, or --store for another one",
            file=sys.stderr,
        )
        return 1
    except (InputError, StoreError) as exc:
        print(f"scrapy-neardup: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # an output that cannot be written, a full disk
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"scrapy-neardup: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
