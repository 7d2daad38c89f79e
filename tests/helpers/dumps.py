"""Crawl dumps the CLI tests read: WARC files of HTML responses (and the records a crawl meets besides)."""

from __future__ import annotations

import io

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter


def write_warc(path, responses, gzip=True):
    """A WARC file of ``responses``: ``(url, body, content type, status)`` tuples, written in order."""
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=gzip)
        for url, body, ctype, status in responses:
            headers = StatusAndHeaders(status, [("Content-Type", ctype)], protocol="HTTP/1.1")
            payload = io.BytesIO(body if isinstance(body, bytes) else body.encode("utf-8"))
            writer.write_record(writer.create_warc_record(url, "response", payload=payload, http_headers=headers))
