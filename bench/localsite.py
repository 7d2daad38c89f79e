"""The local web server of the crawl benchmarks: pages from a lookup, in a process of its own.

A real site does not share the crawler's GIL, so the server runs in a forked process. Its listen backlog
is 1,024: ``http.server``'s default of 5 drops connections at crawl concurrency and distorts throughput.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: A long "not found" page, as the site benchmarks' soft-404 hosts answer every unknown URL.
NOT_FOUND = (
    "<html><head><title>Not found</title></head><body><nav>Home News Sport Culture Contact About Archive</nav>"
    "<main><h1>Page not found</h1><p>Sorry, the page you were looking for could not be found. It may have been "
    "moved, renamed or deleted, or the address may be mistyped. Try the search box above, or go back to the "
    "home page and browse the sections of the site: news, sport, culture and the archive of every article "
    "we have published since the site began.</p></main><footer>Copyright the site. All rights reserved. "
    "Imprint, privacy policy and terms of use.</footer></body></html>"
)

#: What a request is answered with: ``(body, content type)``, or ``None`` for a 404.
PageLookup = Callable[[BaseHTTPRequestHandler], "tuple[bytes, str] | None"]


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True


def serve(lookup: PageLookup) -> tuple[str, multiprocessing.Process]:
    """Start the server; its base URL (``http://127.0.0.1:PORT``) and process (terminate it when done)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = lookup(self)
            if page is None:
                self.send_error(404)
                return
            body, content_type = page
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    process = multiprocessing.get_context("fork").Process(target=server.serve_forever, daemon=True)
    process.start()
    server.socket.close()  # the child serves; this process keeps only the address
    return f"http://127.0.0.1:{server.server_address[1]}", process


def crawl_processes(
    child: Callable[..., None], proxy: str, parts: list[list[str]], settings: dict, workdir: str
) -> tuple[list[dict], dict[str, float]]:
    """Crawls at once, one forked process a part of the URLs (``child(proxy, part, settings, out)`` writes its
    result as JSON to ``out``): each one's result, and their numeric stats summed."""
    import json
    import tempfile

    started = []
    for part in parts:
        out = tempfile.mktemp(dir=workdir, suffix=".json")
        process = multiprocessing.get_context("fork").Process(target=child, args=(proxy, part, settings, out))
        process.start()
        started.append((process, out))
    results = []
    for process, out in started:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"crawl failed (exit code {process.exitcode})")
        with open(out) as f:
            results.append(json.load(f))
    stats: dict[str, float] = {}
    for result in results:
        for name, value in result["stats"].items():
            stats[name] = stats.get(name, 0) + value
    return results, stats
