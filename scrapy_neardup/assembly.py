"""What the settings build, wired in one place: the algorithm, the document pipeline, the template guard,
the store and the detector over it. The crawl and every CLI command build them here, and only here.

:mod:`scrapy_neardup.settings` parses; this module composes. Nothing here imports Scrapy.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

from .settings import Config, ConfigError, default_of

if TYPE_CHECKING:
    from .engine.algorithms.base import Algorithm
    from .engine.detector import Detector
    from .engine.learned import TemplateLearner
    from .engine.prepare import DocumentPipeline
    from .engine.template import TemplateGuard
    from .engine.urlrules import CuratedRules, RuleBook
    from .store import Store, StoreMismatchError

#: The setting behind each parameter a store records (what a mismatch message names).
PARAM_SETTINGS = {
    "algorithm": "NEARDUP_ALGORITHM",
    "num_perm": "NEARDUP_MINHASH_NUM_PERM",
    "k": "NEARDUP_MINHASH_NUM_PERM",
    "seed": "NEARDUP_MINHASH_SEED",
    "shingle_size": "NEARDUP_SHINGLE_SIZE",
    "sketch": "NEARDUP_MINHASH_SKETCH",
    "bands": "NEARDUP_THRESHOLD",
    "rows": "NEARDUP_THRESHOLD",
    "max_distance": "NEARDUP_THRESHOLD or NEARDUP_SIMHASH_MAX_DISTANCE",
    "blocks": "NEARDUP_SIMHASH_BLOCKS",
    "lexicon": "NEARDUP_IMATCH_LEXICON",
    "extractor": "NEARDUP_EXTRACTOR",
    "format_version": "the store format of this version",
}


#: The stored parameters that say what the texts were taken from (:func:`text_params`).
TEXT_PARAMS = frozenset({"extractor"})


def _name_settings(exc: StoreMismatchError) -> str:
    """A store mismatch message with the setting behind each differing parameter named."""
    from .store.base import mismatch_message

    named = [
        f"{d} ({PARAM_SETTINGS[d.split(':', 1)[0]]})" if d.split(":", 1)[0] in PARAM_SETTINGS else d
        for d in exc.differences
    ]
    return mismatch_message(exc.location, named)


def build_algorithm(config: Config) -> Algorithm:
    """The algorithm the settings name, over the index of the store it adopted, if any."""
    from .engine.algorithms import algorithm_class

    algorithm = algorithm_class(config.algorithm).from_settings(config)
    if config.stored_index is None:
        return algorithm
    adopted = algorithm.with_index(json.loads(config.stored_index))
    if adopted is None:  # pragma: no cover - open_detector only records an index the algorithm accepts
        raise ConfigError(f"the stored index {config.stored_index} cannot serve {algorithm.name}")
    return adopted


def build_rule_book(config: Config) -> RuleBook:
    """The URL rules' book with the thresholds the settings give (a crawl, the ``rules`` and ``report``
    commands)."""
    from .engine.urlrules import RuleBook

    return RuleBook(
        config.url_rules_min_support,
        config.url_rules_confidence,
        prior_hosts=config.url_rules_prior_hosts,
        prior_support=config.url_rules_prior_support,
        explore=config.url_rules_explore,
        curated=read_curated_rules(config),
    )


def read_curated_rules(config: Config) -> CuratedRules | None:
    """The hand-written URL rules of ``NEARDUP_URL_RULES_FILE`` (checked when the settings were read)."""
    from .engine.urlrules import read_dud_rules

    if config.url_rules_file is None:
        return None
    with open(config.url_rules_file, encoding="utf-8") as f:
        return read_dud_rules(f.read(), config.url_rules_file)


def build_pipeline(config: Config) -> DocumentPipeline:
    """The stateless document pipeline (extraction and fingerprinting) the settings describe; it reads page
    texts too when the template guard is on."""
    from .engine.prepare import DocumentPipeline

    return DocumentPipeline(
        build_algorithm(config),
        use_main=config.extract,
        min_text_length=config.min_text_length,
        fast=config.extract_fast,
        favor=config.extract_favor,
        with_page_text=config.uses_template_guard,
        find_canonical=config.canonical,
        extractor=config.extractor,
        learn=config.learns_templates,
        learn_agreement=config.learn_agreement,
    )


def build_template_learner(config: Config) -> TemplateLearner | None:
    """The crawl's learned templates (stateful: one per deciding process), or ``None`` when off."""
    if not config.learns_templates:
        return None
    from .engine.learned import TemplateLearner, extractor_id

    return TemplateLearner(
        extractor_id(config.extract_favor, config.extract_fast),
        config.learn_lessons,
        config.learn_agreement,
        config.learn_check_share,
    )


def build_template_guard(config: Config, algorithm: Algorithm | None = None) -> TemplateGuard | None:
    """The template guard (stateful: one per deciding process), or ``None`` when it is off. ``algorithm``:
    the one these settings already built, if the caller has it (saves building it again)."""
    if not config.uses_template_guard:
        return None
    from .engine.template import TemplateGuard

    return TemplateGuard(config.template_repeats, algorithm=algorithm or build_algorithm(config))


def text_params(config: Config) -> dict[str, object]:
    """What the fingerprinted texts are taken from, as the store records it: the main-content extractor,
    when it is not trafilatura (the stores made before the setting existed record none)."""
    if config.extract and config.extractor != default_of("NEARDUP_EXTRACTOR"):
        return {"extractor": config.extractor}
    return {}


def new_detector(config: Config, algorithm: Algorithm, store: Store, kind: type[Detector] | None = None) -> Detector:
    """A detector of ``algorithm`` over ``store`` (not opened) with the settings' rules for known keys
    (re-check changed content, the age limit) and what its texts are taken from; ``kind``: a subclass of
    :class:`Detector` to build instead."""
    from .engine.detector import Detector

    return (kind or Detector)(
        algorithm,
        store,
        recheck_changed=config.recheck_changed,
        max_age_secs=config.expiration_secs or None,
        text_params=text_params(config),
    )


def open_detector(config: Config, store: Store, reset: bool = False) -> tuple[Config, Detector, str]:
    """Open ``store`` for these settings: the configuration to go on with, the open detector, and a note
    (empty unless the store's index was adopted).

    A store made with another threshold keeps its signatures, which do not depend on the threshold; only
    its index (MinHash's LSH bands, SimHash's tables) was shaped for the old one. Such a store is opened as
    it is, verified at the new threshold, with candidates from its own index, and the note says what that
    index finds at the new threshold (``NEARDUP_RESET`` re-indexes, by forgetting every page). Anything
    else that differs cannot be converted and raises :class:`~scrapy_neardup.store.StoreMismatchError`,
    naming the settings.
    """
    from .store import StoreMismatchError

    algorithm = build_algorithm(config)
    detector = new_detector(config, algorithm, store)
    try:
        detector.open(reset=reset)
        return config, detector, ""
    except StoreMismatchError as exc:
        store.close()
        try:
            stored = {name: json.loads(value) for name, value in exc.stored.items()}
        except ValueError:
            stored = {}
        own_text = text_params(config)
        stored_text = {k: v for k, v in stored.items() if k in TEXT_PARAMS}
        adopted = (
            algorithm.with_index({k: v for k, v in stored.items() if k != "format_version" and k not in TEXT_PARAMS})
            if stored.get("format_version") == detector.meta()["format_version"] and stored_text == own_text
            else None
        )
        if adopted is None:
            raise StoreMismatchError(_name_settings(exc), exc.location, exc.differences, exc.stored) from None
        location, differences = exc.location, exc.differences
    adopting = replace(config, stored_index=json.dumps(adopted.params(), sort_keys=True))
    detector = new_detector(adopting, build_algorithm(adopting), store)
    detector.open()
    note = (
        f"the store at {location} was indexed for another threshold ({'; '.join(differences)}); "
        f"its fingerprints are kept and compared at threshold {config.threshold:g}: {adopted.index_note()}. "
        "NEARDUP_RESET = True would re-index it for this threshold, by forgetting every page"
    )
    return adopting, detector, note


def build_store(config: Config, spider_name: str, data_dir: str) -> Store:
    """The (not yet open) store of a spider: ``NEARDUP_STORE_URL`` or its default file, built by the backend
    of the URL's scheme or by ``NEARDUP_STORE_CLASS``, with the store settings, and the spider's Redis key
    prefix (``NEARDUP_REDIS_KEY``)."""
    from .store import store_from_url

    return store_from_url(
        config.resolve_store_url(spider_name, data_dir),
        store_class=config.store_class,
        commit_every=config.store_commit_every,
        commit_secs=config.store_commit_secs,
        make_folders=config.store_url is None,  # the default file's folder is ours to make; a given path's is not
        prefix=config.redis_key % {"spider": spider_name},
        retries=config.redis_retries,
        timeout_secs=config.redis_timeout_secs,
        start_wait_secs=config.redis_start_wait_secs,
        bucket_bins=config.redis_bucket_bins,
        tls_ca_file=config.redis_tls_ca_file,
        tls_cert_file=config.redis_tls_cert_file,
        tls_key_file=config.redis_tls_key_file,
    )
