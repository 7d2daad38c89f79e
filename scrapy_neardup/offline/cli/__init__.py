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

import sys

from .dedup import cmd_dedup
from .evaluate import cmd_evaluate, cmd_lexicon, cmd_tune
from .parser import build_parser
from .rules import cmd_report, cmd_rules, dud_rules
from .stores import cmd_store


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from ...store.base import StoreError, StoreMismatchError
    from ..inputs import InputError

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


__all__ = ["build_parser", "dud_rules", "main"]
