"""Reading WARC files: warcio (the reader the CLI falls back on) against FastWARC (Bevendorff et al., the
Resiliparse project's reader in C++), side by side on real pages.

    python3 dev.py bench bench/warc_readers.py ../shared/neardup-dev [--repeat 5] [--copies 4]

The WARC: the set's real pages (those with an http(s) URL) as ``response`` records (with their HTTP headers),
``--copies`` times over, written by warcio, gzip per record (``.warc.gz``), and the same uncompressed
(``.warc``). Each reader reads every record the way the CLI does: the target URI, the HTTP ``Content-Type``
and ``Link`` headers, and the whole payload. Medians of ``--repeat`` runs, each reader in turn; the ratio is
warcio's time over FastWARC's.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from scrapy_neardup.offline.evaluation import load_manifest, read_page  # noqa: E402


def write_warc(path: str, pages: list[tuple[str, bytes]], gzip: bool) -> None:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=gzip)
        for url, body in pages:
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            writer.write_record(
                writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=headers)
            )


def read_warcio(path: str) -> int:
    from warcio.archiveiterator import ArchiveIterator

    size = 0
    with open(path, "rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_type != "response":
                continue
            record.rec_headers.get_header("WARC-Target-URI")
            record.http_headers.get_header("Content-Type")
            record.http_headers.get_header("Link")
            size += len(record.content_stream().read())
    return size


def read_fastwarc(path: str) -> int:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    size = 0
    with open(path, "rb") as f:
        for record in ArchiveIterator(f, record_types=WarcRecordType.response, parse_http=True):
            record.headers.get("WARC-Target-URI")
            record.http_headers.get("Content-Type")
            record.http_headers.get("Link")
            size += len(record.reader.read())
    return size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--copies", type=int, default=4)
    args = parser.parse_args()
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    pages = [
        (f"{row['url'].strip().replace(' ', '%20')}#{n}", read_page(os.path.join(args.dataset, row["file"])))
        for n in range(args.copies)
        for row in manifest
        if row["url"].startswith("http")
    ]
    workdir = tempfile.mkdtemp(prefix="warc-readers-")
    out = {"command": " ".join(["bench/warc_readers.py", *sys.argv[1:]]), "records": len(pages)}
    for name, gzip in (("warc.gz", True), ("warc", False)):
        path = os.path.join(workdir, f"pages.{name}")
        write_warc(path, pages, gzip)
        times: dict[str, list[float]] = {"warcio": [], "fastwarc": []}
        sizes = {}
        for _ in range(args.repeat):
            for reader, fn in (("warcio", read_warcio), ("fastwarc", read_fastwarc)):
                started = time.perf_counter()
                sizes[reader] = fn(path)
                times[reader].append(time.perf_counter() - started)
        if sizes["warcio"] != sizes["fastwarc"]:
            raise SystemExit(f"the readers disagree on {name}: {sizes}")
        medians = {k: statistics.median(v) for k, v in times.items()}
        out[name] = {
            "bytes": os.path.getsize(path),
            "payload_bytes": sizes["warcio"],
            **{f"{k}_s": round(v, 3) for k, v in medians.items()},
            "warcio_over_fastwarc": round(medians["warcio"] / medians["fastwarc"], 2),
        }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
