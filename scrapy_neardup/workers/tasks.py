"""What a worker process runs: its start (:func:`init_worker`: the document pipeline the settings describe,
built once, and the worker's own learned templates) and the tasks, module-level functions that take their
pipeline from :func:`worker_pipeline`. A caller without a pool runs the same tasks in its own process after
:func:`init_worker` (``in_worker=False``). The pool that sends them: :mod:`scrapy_neardup.workers`."""

from __future__ import annotations

import pickle
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..engine.extract import decode_html, quiet_trafilatura
from ..engine.urlrules import host_of

if TYPE_CHECKING:
    from ..engine.learned import Offers, TemplateLearner
    from ..engine.prepare import DocumentPipeline, Prepared
    from ..settings import Config

_pipeline: DocumentPipeline | None = None
#: This worker's own learned templates, from the pages it extracts (with ``NEARDUP_LEARN_TEMPLATES``): a
#: section page lists its articles at once, and the crawl sends them to the workers before any of them has
#: come back to teach the crawler process; each worker learns from its share of them meanwhile.
_local: TemplateLearner | None = None
#: The offers last unpickled here, by their pickled bytes: a host's offers change seldom, and are sent with
#: each of its pages (unpickling them costs more than looking them up).
_unpickled: dict[bytes, Offers] = {}
_UNPICKLED_KEPT = 8


def _die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent ends (no orphans after a hard kill)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no prctl: the pool's own cleanup still runs
        pass


def init_worker(config: Config, in_worker: bool = True, learn_locally: bool | None = None) -> None:
    """A worker's start: build the stateless document pipeline once, and the worker's own learned templates
    (``learn_locally``, by default in a worker process). ``in_worker`` false: the calling process runs the
    tasks itself (its signals and life are its own)."""
    from ..assembly import build_pipeline, build_template_learner

    global _pipeline, _local
    if in_worker:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent decides
        _die_with_parent()
    quiet_trafilatura()
    _pipeline = build_pipeline(config)
    _local = build_template_learner(config) if (in_worker if learn_locally is None else learn_locally) else None


def worker_pipeline() -> DocumentPipeline:
    """The pipeline :func:`init_worker` built in this process: the one every task uses."""
    if _pipeline is None:
        raise RuntimeError("init_worker was not called in this process")
    return _pipeline


def prepare_html(
    pipeline: DocumentPipeline,
    body: bytes,
    url: str,
    content_type: str | None,
    offers: bytes | None = None,
    local: TemplateLearner | None = None,
) -> Prepared:
    """A page's body to what the decision needs, with when the whole job began and how long it took;
    ``offers``: its host's learned selectors (:mod:`..engine.learned`), pickled by the crawler process;
    ``local``: the calling worker's own learned templates, under those offered, taught by this page too."""
    started, cpu = time.perf_counter(), time.thread_time()
    offered = None if offers is None else _offers_of(offers)
    html = decode_html(body, content_type)
    host = host_of(url) if local is not None and offered is not None else ""
    if local is None or offered is None or not host:
        prepared = pipeline.from_html(html, url, offered)
    else:
        prepared = pipeline.from_html(html, url, local.offers(host).under(offered))
        own = prepared.learned in ("replayed", "agreed", "disagreed") and prepared.template not in offered.selectors
        local.observe(host, prepared.template, prepared.learned, prepared.lesson, prepared.prekey, prepared.agreement)
        prepared = replace(prepared, own_selector=own)
    return replace(
        prepared,
        work_seconds=time.perf_counter() - started,
        work_started=started,
        cpu_seconds=time.thread_time() - cpu,
    )


def _offers_of(packed: bytes) -> Offers:
    offers = _unpickled.get(packed)
    if offers is None:
        offers = pickle.loads(packed)  # pickled by the crawler process: this package's own, never a page's
        if len(_unpickled) >= _UNPICKLED_KEPT:
            _unpickled.clear()  # one call: safe where threads extract (NEARDUP_WORKERS = 0)
        _unpickled[packed] = offers
    return offers


def prepare_text(pipeline: DocumentPipeline, text: str) -> Prepared:
    """An item's text to what the decision needs."""
    cpu = time.thread_time()
    return replace(pipeline.from_text(text), cpu_seconds=time.thread_time() - cpu)


def analyze_html(body: bytes, url: str, content_type: str | None, offers: bytes | None = None) -> tuple:
    """Worker task: :func:`prepare_html` in this worker, with its own learned templates, as plain values
    (:meth:`Prepared.to_wire`)."""
    return prepare_html(worker_pipeline(), body, url, content_type, offers, _local).to_wire()


def analyze_text(text: str) -> tuple:
    """Worker task: :func:`prepare_text` in this worker, as plain values."""
    return prepare_text(worker_pipeline(), text).to_wire()


#: Each worker task and the function that does its work in the calling process (``NEARDUP_WORKERS = 0``).
IN_PROCESS: dict[Callable[..., Any], Callable[..., Prepared]] = {analyze_html: prepare_html, analyze_text: prepare_text}
