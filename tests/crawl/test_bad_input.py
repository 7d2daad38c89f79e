"""Bad input never crashes a crawl or loses data: a real crawl of hostile responses on 127.0.0.1."""

import io
import json
import os
import random
import sqlite3
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import SPIDERS
from helpers.crawlkit import ServerThread, run_scrapy

pytestmark = pytest.mark.slow
SPIDER = os.path.join(SPIDERS, "paths.py")

rng = random.Random(5)
CJK = [chr(c) for c in range(0x4E00, 0x4E00 + 800)]
ARABIC = [
    "كتاب",
    "مدينة",
    "نهر",
    "جسر",
    "سوق",
    "مدرسة",
    "شارع",
    "بحر",
    "جبل",
    "حديقة",
    "قطار",
    "مكتبة",
    "طالب",
    "معلم",
    "صحيفة",
    "نافذة",
    "باب",
    "شمس",
    "قمر",
    "مطر",
]
HEBREW = ["ספר", "עיר", "נהר", "גשר", "שוק", "בית", "ספר", "רחוב", "ים", "הר", "גן", "רכבת", "ספרייה", "תלמיד"]


def cjk_text(seed, n=900):
    r = random.Random(seed)
    return "".join(r.choice(CJK) + ("。" if i % 23 == 22 else "") for i in range(n))


def words_text(vocab, seed, n=400):
    r = random.Random(seed)
    return " ".join(r.choice(vocab) + str(r.randint(0, 50)) for _ in range(n))


def edit_chars(text, k, seed):
    r = random.Random(seed)
    chars = list(text)
    for i in r.sample(range(len(chars)), k):
        chars[i] = "变"
    return "".join(chars)


def page(body, lang="en", title="t"):
    return (
        f'<html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body><article><p>{body}</p></article></body></html>"
    )


def build_pages():
    zip_bytes = io.BytesIO()
    with zipfile.ZipFile(zip_bytes, "w") as z:
        z.writestr("a.txt", "hello" * 100)
    cjk, arabic = cjk_text(1), words_text(ARABIC, 2)
    latin = "Ça coûte très cher à Zürich: naïve façade, résumé, déjà vu. " * 20
    html = "text/html; charset=utf-8"
    return {
        # path: (content type, body, expected skip reason or "checked")
        "/empty": (html, b"", "empty"),
        "/blank": (html, b"   \n\t  ", "empty"),
        "/pdf": (html, b"%PDF-1.4\n" + bytes(rng.randrange(256) for _ in range(3000)), "binary"),
        "/png": (html, b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 10, "binary"),
        "/zip": (html, zip_bytes.getvalue(), "binary"),
        "/image": ("image/jpeg", b"\xff\xd8\xff\xe0" + b"\x00" * 500, "not_html"),
        "/json": ("application/json", json.dumps({"a": list(range(100))}).encode(), "not_html"),
        "/huge": (html, page("word " * 4_200_000).encode(), "too_large"),  # ~21 MB
        "/nested": (html, ("<div>" * 20000 + "deep text " * 100 + "</div>" * 20000).encode(), "any"),
        "/js-only": (
            html,
            b"<html><head><script>document.write('hi')</script></head><body><div id=app></div></body></html>",
            "no_text",
        ),
        "/no-text": (
            html,
            b"<html><body><img src=a.png><hr><table><tr><td></td></tr></table></body></html>",
            "no_text",
        ),
        "/short": (html, page("Just a few words here.").encode(), "too_little_text"),
        "/mislabelled": ("text/html; charset=utf-8", page(latin).encode("latin-1"), "checked"),
        "/bogus-charset": ("text/html; charset=x-no-such-charset", page(latin).encode("utf-8"), "checked"),
        "/invalid-utf8": (html, page(latin).encode("utf-8").replace(b"\xc3\xa7", b"\xc3\x28"), "checked"),
        "/malformed": (
            html,
            (
                "<html><body><p>unclosed <b>bold <i>both <table><tr><td>cell "
                + latin
                + " </p></div></span><<<>>> &bogus; &#xZZ; <p attr='x>"
            ).encode(),
            "checked",
        ),
        "/cjk": (html, page(cjk, "zh").encode(), "checked"),
        "/cjk-copy": (html, page(edit_chars(cjk, 4, 3), "zh").encode(), "checked"),
        "/cjk-other": (html, page(cjk_text(9), "zh").encode(), "checked"),
        "/rtl": (html, page(arabic, "ar").encode(), "checked"),
        "/rtl-copy": (html, page(arabic.replace(ARABIC[0] + "1 ", ARABIC[1] + "1 ", 2), "ar").encode(), "checked"),
        "/hebrew": (html, page(words_text(HEBREW, 4), "he").encode(), "checked"),
        "/server-error": (html, page(latin).encode(), "status"),
    }


PAGES = build_pages()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        ctype, body, _ = PAGES[self.path]
        self.send_response(500 if self.path == "/server-error" else 200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_hostile_responses_pass_through_counted_and_nothing_is_stored_wrongly(tmp_path):
    with ServerThread(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as server:
        paths_file = tmp_path / "paths.txt"
        paths_file.write_text("\n".join(PAGES))
        db = tmp_path / "store.sqlite3"
        result = run_scrapy(
            ["runspider", SPIDER, "-a", f"base={server.url}", "-a", f"paths_file={paths_file}"],
            tmp_path,
            {
                "ADDONS": json.dumps({"scrapy_neardup.Addon": 300}),
                "NEARDUP_ENABLED": "True",
                "NEARDUP_ACTION": "tag",
                "NEARDUP_STORE_URL": f"sqlite:///{db}",
                "HTTPERROR_ALLOW_ALL": "True",
                "RETRY_ENABLED": "False",
            },
            cwd=str(tmp_path),
        )
    assert result.returncode == 0 and result.stats["finish_reason"] == "finished"
    assert "Traceback" not in result.log, result.log[-5000:]
    # Every response reached the spider: nothing was lost in tag mode.
    assert sorted(i["path"] for i in result.items) == sorted(PAGES)
    stats = result.neardup_stats()
    expected = {}
    for _, _, reason in PAGES.values():
        if reason not in ("checked", "any"):
            expected[f"neardup/skipped/{reason}"] = expected.get(f"neardup/skipped/{reason}", 0) + 1
    skipped = {k: v for k, v in stats.items() if k.startswith("neardup/skipped/")}
    # Deeply nested markup: libxml2 stops at its depth limit; whatever it yields is fine, a crash is not.
    extra = {k: skipped.get(k, 0) - expected.get(k, 0) for k in set(skipped) | set(expected)}
    assert all(v == 0 for k, v in extra.items() if k != "neardup/skipped/no_text"), (skipped, expected)
    assert extra.get("neardup/skipped/no_text", 0) in (0, 1)
    for reason in {r for _, _, r in PAGES.values() if r not in ("checked", "any")}:
        assert "passed on unchecked: " in result.log and f"neardup/skipped/{reason}" in result.log
    with sqlite3.connect(str(db)) as conn:
        stored = {
            row[0][len(server.url) - 1 :]: row[1]
            for row in conn.execute("SELECT d.key, c.key FROM docs d LEFT JOIN docs c ON c.id = d.canonical")
        }
    must_store = {p for p, (_, _, r) in PAGES.items() if r == "checked"}
    assert must_store <= set(stored) <= must_store | {"/nested"}
    assert ("/nested" in stored) == (extra.get("neardup/skipped/no_text", 0) == 0)
    assert stats["neardup/checked"] == len(stored)

    # Scripts that need no spaces, and right-to-left ones, are compared on their own terms.
    def paired(a, b):  # whichever was fetched first is the canonical of the other
        return (stored[a] or "").endswith(b) != (stored[b] or "").endswith(a)

    assert paired("/cjk", "/cjk-copy") and paired("/rtl", "/rtl-copy")
    assert stored["/cjk-other"] is None and stored["/hebrew"] is None
