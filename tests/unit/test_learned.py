"""Learned templates (scrapy_neardup.engine.learned): lessons from trafilatura's text, selectors replayed by
lexbor, what a replay refuses, the learner's life of a selector, and its record in the store."""

from __future__ import annotations

import json
from dataclasses import replace

from helpers.sitegen import templated_page

from scrapy_neardup.engine import learned
from scrapy_neardup.engine.algorithms.minhash import MinHashLSH
from scrapy_neardup.engine.extract import main_text
from scrapy_neardup.engine.learned import Offer, Offers, Selector, TemplateLearner
from scrapy_neardup.engine.learned.learner import PARSE_ALL_TRIAL
from scrapy_neardup.engine.prepare import DocumentPipeline
from scrapy_neardup.engine.template import TemplateGuard

EXTRACTOR = "trafilatura test favor=recall fast=0 learner=1"
#: Every page parsed for its template, nothing learned yet.
PARSE_ALL = Offers({}, bytes([255]) * (learned.KEY_BITS // 8), bytes(learned.KEY_BITS // 8))


def taught(page: str) -> learned.Lesson:
    found = learned.lesson(learned.parse(page), main_text(page))
    assert found is not None
    return found


def teach_again(learner: TemplateLearner, key: int, seeds) -> None:
    """Three lessons of template 0 from the next pages of ``seeds``: its selector is active again."""
    for _ in range(3):
        learner.observe("site.test", key, "", taught(templated_page(0, next(seeds))))
    assert learner.active("site.test", key)


def learnt(template: int = 0, pages=range(3)) -> tuple[TemplateLearner, int]:
    learner = TemplateLearner(EXTRACTOR, lessons=len(pages))
    key = learned.skeleton_key(learned.parse(templated_page(template, 0)))
    changes = [learner.observe("site.test", key, "", taught(templated_page(template, seed))) for seed in pages]
    assert changes[-1] == "learned" and set(changes[:-1]) == {""}
    return learner, key


def test_pages_of_one_template_share_a_key_and_other_templates_do_not():
    keys = {t: {learned.skeleton_key(learned.parse(templated_page(t, seed))) for seed in range(5)} for t in range(3)}
    assert all(len(k) == 1 for k in keys.values())
    assert len(set.union(*keys.values())) == 3


def test_a_selector_learned_from_three_pages_reproduces_trafilatura_on_a_fourth():
    learner, key = learnt()
    offer = learner.offers("site.test").selectors[key]
    page = templated_page(0, 41)
    replayed = learned.replay(learned.parse(page), offer)
    assert replayed is not None
    assert learned.agreement(replayed, main_text(page)) >= learned.AGREEMENT
    assert "Read also" not in replayed and "Share" not in replayed  # the blocks trafilatura drops


def test_a_replay_refuses_a_page_with_text_where_no_lesson_looked_and_one_without_the_article_element():
    learner, key = learnt()
    offer = learner.offers("site.test").selectors[key]
    poll = "<div class='poll'>Vote now on the river harvest question of the week, it only takes a minute.</div>"
    assert learned.replay(learned.parse(templated_page(0, 41, extra_block=poll)), offer) is None
    assert learned.replay(learned.parse(templated_page(0, 41, article_class="body-text")), offer) is None


def test_lessons_that_disagree_on_the_article_element_make_no_selector():
    learner = TemplateLearner(EXTRACTOR, lessons=3)
    lessons = [
        taught(templated_page(0, 1)),
        taught(templated_page(0, 2, article_class="body-text")),
        taught(templated_page(0, 3)),
    ]
    assert [learner.observe("site.test", 7, "", one) for one in lessons] == ["", "", ""]
    assert learner.offers("site.test").selectors == {}


def test_a_lesson_falls_back_inside_the_article_element_when_its_blocks_do_not_reproduce_trafilatura():
    """The article element (a heading over a lead over the body) keeps a mixed block five levels down whole;
    the element inside it can split that block, and its lesson is the one taken."""
    lead = "A short lead sentence opens this story about the valley orchards"
    first = " ".join(f"orchard{i} grower{i}" for i in range(30))
    second = " ".join(f"harvest{i} cider{i}" for i in range(30))
    third = " ".join(f"press{i} barrel{i}" for i in range(30))
    fourth = " ".join(f"blossom{i} frost{i}" for i in range(30))
    junk = " ".join(f"advert{i} promo{i}" for i in range(30))
    page = (
        "<html><body><nav><a href='/'>Home</a> <a href='/n'>News</a></nav>"
        "<div class='wrap'><h1>Valley orchards report</h1>"
        f"<div class='story'><p>{lead}</p><div class='body'><p>{first}</p><div class='part'><p>{third}</p>"
        f"<div class='sub'><p>{fourth}</p><div class='mixed'><p>{second}</p><div class='promo'>{junk}</div>"
        "</div></div></div></div></div></div></body></html>"
    )
    main = f"Valley orchards report\n{lead}\n{first}\n{third}\n{fourth}\n{second}"
    tree = learned.parse(page)
    found = learned.lesson(tree, main)
    assert found is not None
    assert found.locator.css.endswith("div.story") and found.agreement >= learned.AGREEMENT
    assert "advert3" not in learned.replay(tree, Offer(0, found.locator, found.decisions, 0.0))
    # where no element reaches the bound, the closest is taught (and the learner refuses it), not the outermost
    closest = learned.lesson(tree, main, bound=1.01)
    assert closest is not None and (closest.locator, closest.agreement) == (found.locator, found.agreement)


def test_a_block_kept_nearly_whole_is_split_where_trafilatura_dropped_a_box_inside_it():
    """A pull quote beside the paragraphs, three field wrappers down: its block is over nine tenths in
    trafilatura's text, and kept whole it would keep the quote trafilatura dropped."""
    paragraphs = [" ".join(f"river{p}x{i} bank{p}x{i}" for i in range(12)) for p in range(4)]
    lead = " ".join(f"delta{i} marsh{i}" for i in range(10))
    quote = "Rivers remember every flood that shaped them"
    page = (
        "<html><body><nav><a href='/'>Home</a> <a href='/n'>News</a></nav>"
        f"<article><h1>The river report</h1><p class='lead'>{lead}</p>"
        "<div class='field'><div class='items'><div class='item'>"
        f"<p>{paragraphs[0]}</p><p>{paragraphs[1]}</p><div class='pull-quote'>{quote}</div>"
        f"<p>{paragraphs[2]}</p><p>{paragraphs[3]}</p></div></div></div>"
        "<div class='share'>Share this story with your friends on every network</div></article></body></html>"
    )
    main = "The river report\n" + lead + "\n" + "\n".join(paragraphs)
    tree = learned.parse(page)
    found = learned.lesson(tree, main)
    assert found is not None and found.locator.css == "body > article" and found.agreement == 1.0
    assert found.decisions[">div.field>div.items>div.item>div.pull-quote"] is False
    assert found.decisions[">div.field>div.items>div.item>p"] is True
    assert ">div.field" not in found.decisions  # split, not kept whole
    replayed = learned.replay(tree, Offer(0, found.locator, found.decisions, 0.0))
    assert replayed is not None and "Rivers remember" not in replayed and "Share this" not in replayed
    # with the quote in trafilatura's text too, nothing under the block was dropped: it stays one decision
    whole = learned.lesson(tree, main + "\n" + quote)
    assert whole is not None and whole.decisions.get(">div.field") is True


def test_a_disagreeing_check_retires_the_selector_and_three_retirements_leave_the_template_to_trafilatura():
    learner, key = learnt()
    assert learner.observe("site.test", key, "replayed", None) == ""
    assert learner.observe("site.test", key, "disagreed", None) == "retired"
    assert key not in learner.offers("site.test").selectors and not learner.active("site.test", key)
    for round_ in (2, 3):
        for seed in range(3):
            learner.observe("site.test", key, "", taught(templated_page(0, 10 * round_ + seed)))
        assert learner.active("site.test", key)
        change = learner.observe("site.test", key, "disagreed", None)
    assert change == "unstable"
    assert learner.offers("site.test").selectors[key].unstable
    assert learner.observe("site.test", key, "", taught(templated_page(0, 99))) == ""  # not learned now
    assert learner.waiting("site.test", key) == learned.RELEARN_AFTER - 1


def test_an_unstable_template_is_learned_again_later_and_each_time_it_fails_again_it_waits_twice_as_long():
    """Left to trafilatura for good, a large template would cost trafilatura's price on every page of every
    later crawl for a few checks that once disagreed. It waits ``RELEARN_AFTER`` pages, teaches again, and
    one more short-lived selector sends it back for twice as long; one that holds forgives it all."""
    learner, key = learnt()
    seed = iter(range(200, 2000))

    def fail_short_lived():
        teach_again(learner, key, seed)
        return learner.observe("site.test", key, "disagreed", None)

    assert learner.observe("site.test", key, "disagreed", None) == "retired"
    assert fail_short_lived() == "retired"
    assert fail_short_lived() == "unstable"
    for wait in (learned.RELEARN_AFTER, 2 * learned.RELEARN_AFTER, 4 * learned.RELEARN_AFTER):
        assert learner.waiting("site.test", key) == wait
        changes = [learner.observe("site.test", key, "", None) for _ in range(wait)]
        assert changes == [""] * (wait - 1) + ["relearning"]
        assert learner.waiting("site.test", key) is None
        offers = learner.offers("site.test")
        assert key not in offers.selectors and key in offers.retired  # teaches again, as a retired template
        saved = learner.take_changes()
        assert [s.state for s in saved] == ["retired"]
        assert fail_short_lived() == "unstable"  # one short-lived selector is enough to send it back
    # a selector that holds forgives every retirement before it: the next failures start from the beginning
    learner_pages = 4 * learned.RELEARN_AFTER * 2
    assert learner.waiting("site.test", key) == learner_pages
    for _ in range(learner_pages):
        learner.observe("site.test", key, "", None)
    teach_again(learner, key, seed)
    for _ in range(learned.FORGIVEN_AFTER):
        learner.observe("site.test", key, "replayed", None)
    assert learner.observe("site.test", key, "disagreed", None) == "retired"
    assert fail_short_lived() == "retired"
    assert fail_short_lived() == "retired"
    assert fail_short_lived() == "unstable"
    assert learner.waiting("site.test", key) == learned.RELEARN_AFTER
    # another process's selector for it, adopted, ends the wait here
    learner.observe("site.test", key, "", None)
    record = replace(learner.selectors()[0], state="active")
    learner.take_changes()
    assert learner.adopt([record]) == 1 and learner.active("site.test", key)
    assert learner.waiting("site.test", key) is None


def test_an_unstable_templates_wait_runs_on_over_the_sites_later_crawls_and_processes():
    """A crawl of a site meets far fewer of a template's pages than its wait: counted in each crawl process
    alone, the wait would start again with every crawl, and a template found unstable once would be left to
    trafilatura in every later crawl. The count is kept with the selector, in the store."""
    learner, key = learnt()
    seed = iter(range(200, 2000))
    assert learner.observe("site.test", key, "disagreed", None) == "retired"
    for _ in range(learned.MAX_RETIREMENTS - 1):
        teach_again(learner, key, seed)
        change = learner.observe("site.test", key, "disagreed", None)
    assert change == "unstable"
    crawl = learned.RELEARN_AFTER // 4  # the template's pages a crawl meets
    for _ in range(crawl):
        assert learner.observe("site.test", key, "", None) == ""
    stored = {(s.host, s.template): Selector.from_json(s.to_json()) for s in learner.take_changes()}
    for number in range(2, 5):  # the site's next crawls, each a new process starting from the store
        later = TemplateLearner(EXTRACTOR, lessons=3)
        assert later.adopt(list(stored.values())) == 1
        assert later.waiting("site.test", key) == learned.RELEARN_AFTER - (number - 1) * crawl
        changes = [later.observe("site.test", key, "", None) for _ in range(crawl)]
        stored.update({(s.host, s.template): Selector.from_json(s.to_json()) for s in later.take_changes()})
    assert changes == [""] * (crawl - 1) + ["relearning"]  # the fourth crawl's last page ends the wait
    assert stored["site.test", key].state == "retired" and stored["site.test", key].waited == 0
    # Two processes of one crawl: each takes the other's longer count of the same wait, never a shorter one.
    one, two = TemplateLearner(EXTRACTOR, lessons=3), TemplateLearner(EXTRACTOR, lessons=3)
    unstable = replace(stored["site.test", key], state="unstable", retired=3, waited=10)
    one.adopt([unstable]), two.adopt([unstable])
    for _ in range(5):
        one.observe("site.test", key, "", None)
    ahead = one.take_changes()
    assert two.adopt(ahead) == 1 and two.waiting("site.test", key) == learned.RELEARN_AFTER - 15
    assert one.adopt([unstable]) == 0 and one.waiting("site.test", key) == learned.RELEARN_AFTER - 15


def test_a_retirement_after_long_service_is_forgiven_and_still_reaches_every_process():
    """A selector that held its template for ``FORGIVEN_AFTER`` pages and is then retired (by a page it
    misreads, checked again in every crawl) is learned again however often that happens; its retirements
    still count up, so that another process takes the retired record."""
    learner, key = learnt()
    for round_ in range(learned.MAX_RETIREMENTS + 2):
        for _ in range(learned.FORGIVEN_AFTER):
            learner.observe("site.test", key, "replayed", None)
        assert learner.observe("site.test", key, "disagreed", None) == "retired"
        for seed in range(3):
            learner.observe("site.test", key, "", taught(templated_page(0, 10 * round_ + seed)))
        assert learner.active("site.test", key)
    record = learner.selectors()[0]
    assert record.retired == record.forgiven == learned.MAX_RETIREMENTS + 2
    assert Selector.from_json(record.to_json()) == record
    other, _ = learnt()
    other.take_changes()
    for _ in range(learned.FORGIVEN_AFTER):
        learner.observe("site.test", key, "replayed", None)
    learner.observe("site.test", key, "disagreed", None)
    assert other.adopt(learner.take_changes()) == 1 and not other.active("site.test", key)
    # retired sooner, the forgiven ones aside: left to trafilatura at the third
    for round_ in range(1, learned.MAX_RETIREMENTS + 1):
        for seed in range(3):
            learner.observe("site.test", key, "", taught(templated_page(0, 70 + 10 * round_ + seed)))
        change = learner.observe("site.test", key, "disagreed", None)
        assert change == ("unstable" if round_ == learned.MAX_RETIREMENTS else "retired")


def test_short_lived_selectors_between_long_lived_ones_do_not_add_up_three_in_a_row_do():
    """Over a long crawl a template's selector may be retired early now and then (a page trafilatura reads
    otherwise, checked early): a selector that then holds for ``FORGIVEN_AFTER`` pages shows the template can be
    learned and forgives the retirements before it. Only ``MAX_RETIREMENTS`` short-lived ones in a row leave
    the template to trafilatura."""
    learner, key = learnt()
    seed = iter(range(100, 1000))

    def relearn():
        teach_again(learner, key, seed)

    for _ in range(4):  # short, short, long: never three short-lived in a row
        for served in (0, 1, learned.FORGIVEN_AFTER):
            for _ in range(served):
                learner.observe("site.test", key, "replayed", None)
            assert learner.observe("site.test", key, "disagreed", None) == "retired"
            relearn()
    record = learner.selectors()[0]
    assert record.retired == record.forgiven == 12
    changes = []
    for _ in range(learned.MAX_RETIREMENTS):
        changes.append(learner.observe("site.test", key, "disagreed", None))
        if changes[-1] == "retired":
            relearn()
    assert changes == ["retired"] * (learned.MAX_RETIREMENTS - 1) + ["unstable"]


def test_a_check_retires_on_a_replay_far_off_or_when_the_mean_miss_passes_the_bound():
    bound = learned.AGREEMENT  # a replay may miss epsilon = 0.05 of trafilatura's word pairs
    learner, key = learnt()
    lessons = learner.selectors()[0]
    assert lessons.checked == 3 and 0.0 <= lessons.missed <= 3 * (1 - bound)  # its lessons, each within the bound
    # trafilatura's own wobble on one page (a teaser kept): counted, the selector serves on
    assert learner.observe("site.test", key, "disagreed", None, agreement=bound - 0.02) == ""
    assert learner.active("site.test", key)
    kept = learner.selectors()[0]
    assert (kept.checked, kept.served, kept.verified) == (lessons.checked + 1, lessons.served + 1, lessons.verified)
    # misses that keep the mean over the bound retire it, as one replay missing over twice the bound does
    change = ""
    while change == "":
        change = learner.observe("site.test", key, "disagreed", None, agreement=bound - 0.03)
    retired = learner.selectors()[0]
    assert change == "retired" and retired.checked > kept.checked
    # held under the bound until the check that retired it (which is not counted in)
    assert retired.missed <= (1 - bound) * retired.checked < retired.missed + 0.08 - (1 - bound)
    fresh, key = learnt()
    assert fresh.observe("site.test", key, "disagreed", None, agreement=1 - 2.2 * (1 - bound)) == "retired"
    assert (
        learned.Selector("h", 1, lessons.locator, {}, EXTRACTOR, checked=1, missed=0.0).after_check(bound - 0.01, bound)
        is not None
    )


def test_a_page_is_parsed_once_its_pre_key_was_met_and_a_template_teaches_from_its_fourth_page():
    learner = TemplateLearner(EXTRACTOR)
    first, other = learned.prekey(templated_page(0, 1)), learned.prekey(templated_page(1, 1))
    assert first == learned.prekey(templated_page(0, 2)) != other  # read without a parse
    assert not learned.in_keys(learner.offers("site.test").parse, first)
    learner.observe("site.test", None, "", None, first)
    offers = learner.offers("site.test")
    assert learned.in_keys(offers.parse, first) and not learned.in_keys(offers.parse, other)
    for met in range(learned.TEACHES_FROM - 1):
        assert not learned.in_keys(learner.offers("site.test").learn, 7)
        learner.observe("site.test", 7, "", None, first)
    assert learned.in_keys(learner.offers("site.test").learn, 7)  # its next page teaches
    assert learner.offers("other.test").selectors == {} and not learner.offers("other.test").parse


def test_a_host_of_ever_new_templates_keeps_teaching_only_the_templates_it_remembers():
    """Templates forgotten (beyond ``MAX_SEEN_TEMPLATES`` a host) leave the teaching set: kept, the teaching
    set of a host of ever new templates would grow without end, and as bits it would have every bit set,
    and every page would teach."""
    from scrapy_neardup.engine.learned.learner import MAX_SEEN_TEMPLATES

    learner = TemplateLearner(EXTRACTOR)
    kept_warm = 0xC0FFEE
    templates = [(i * 0x9E3779B97F4A7C15) % 2**64 for i in range(1, 5 * MAX_SEEN_TEMPLATES)]
    for i, template in enumerate(templates):
        for _ in range(learned.TEACHES_FROM - 1):
            learner.observe("big.test", template, "", None)
        if i % 100 == 0:
            learner.observe("big.test", kept_warm, "", None)
    teaching = learner.offers("big.test").learn
    assert type(teaching) is bytes  # more keys than SPARSE_KEYS: sent as bits
    set_bits = sum(bin(byte).count("1") for byte in teaching)
    assert 0 < set_bits <= MAX_SEEN_TEMPLATES  # at most the templates remembered
    assert learned.in_keys(teaching, templates[-1]) and learned.in_keys(teaching, kept_warm)
    never_met = [(i * 0xD1B54A32D192ED03) % 2**64 for i in range(1, 2001)]
    assert sum(learned.in_keys(teaching, t) for t in never_met) / len(never_met) < 0.5


def test_a_host_met_on_a_few_pages_is_sent_its_few_keys_and_a_large_set_as_bits():
    """Most hosts of a broad crawl are met on a few pages: their offers carry the keys themselves (tens of
    bytes pickled), not ``KEY_BITS`` bits a set (a kilobyte each, in every offer and in the learner's memory
    for every host remembered); a set of more than ``SPARSE_KEYS`` keys is sent as bits."""
    import pickle

    learner = TemplateLearner(EXTRACTOR)
    for page in range(3):
        learner.observe("small.test", 0xABC if page else None, "", None, 0x123)
    offers = learner.offers("small.test")
    assert offers.parse == (0x123,) and offers.learn == ()
    assert len(pickle.dumps(offers, protocol=pickle.HIGHEST_PROTOCOL)) < 300
    learner.observe("small.test", 0xABC, "", None, 0x123)  # the template's third page: it teaches next
    assert learner.offers("small.test").learn == (0xABC,)

    many = [(i * 0x9E3779B97F4A7C15) % 2**64 for i in range(1, learned.SPARSE_KEYS + 2)]
    for prekey in many:
        learner.observe("large.test", None, "", None, prekey)
    parse = learner.offers("large.test").parse
    assert type(parse) is bytes and len(parse) == learned.KEY_BITS // 8
    assert all(learned.in_keys(parse, k) for k in many)

    # A worker's own offers under the deciding process's: the union of both sets, in either form.
    few, more = learned.key_set([1, 2]), learned.key_set(many)
    assert learned.either_keys(few, learned.key_set([2, 3])) == (1, 2, 3)
    assert learned.either_keys(few, ()) is few
    union = learned.either_keys(few, more)
    assert type(union) is bytes and all(learned.in_keys(union, k) for k in [1, 2, *many])
    assert learned.either_keys(learned.key_set(many[:40]), learned.key_set(many[40:])) == more


def test_checks_thin_out_as_a_selector_serves_and_are_decided_by_the_url():
    assert (
        learned.verify_share(0) == 0.25
        and learned.verify_share(0, floor=0.5) == 0.5
        and learned.verify_share(10_000) == learned.MIN_CHECK_SHARE == 1 / 64
    )
    urls = [f"https://site.test/a/{i}" for i in range(4000)]
    assert 0.2 < sum(learned.sampled(u, 0.25) for u in urls) / len(urls) < 0.3
    assert [learned.sampled(u, 0.25) for u in urls[:50]] == [learned.sampled(u, 0.25) for u in urls[:50]]


def test_a_selector_record_round_trips_as_json_and_anything_else_is_refused():
    learner, key = learnt()
    selector = learner.selectors()[0]
    assert Selector.from_json(selector.to_json()) == selector
    record = json.loads(selector.to_json())
    for broken in (
        {**record, "v": 99},
        {**record, "decisions": {">p": "yes"}},
        {**record, "index": 5, "matches": 1},
        {**record, "state": "trusted"},
        {**record, "served": -1},
        {**record, "missed": record["checked"] + 1},
        {**record, "checked": "3"},
        {**record, "forgiven": record["retired"] + 1},
        {**record, "forgiven": -1},
        {**record, "waited": -1},
        {**record, "waited": "10"},
    ):
        assert Selector.from_json(json.dumps(broken)) is None
    # A record of an earlier release of this format, without the wait's count: read, its count 0.
    earlier = {k: v for k, v in record.items() if k != "waited"}
    assert Selector.from_json(json.dumps(earlier)) == selector and selector.waited == 0
    assert Selector.from_json(b"\x80\x04\x95pickle") is None
    assert Selector.from_json("[1, 2]") is None


def test_the_store_s_selectors_of_another_extractor_are_never_used():
    learner, key = learnt()
    theirs = [
        Selector(s.host, s.template, s.locator, s.decisions, "trafilatura 1.0 favor=recall fast=0 learner=1")
        for s in learner.selectors()
    ]
    fresh = TemplateLearner(EXTRACTOR)
    assert fresh.adopt(theirs) == 0 and fresh.foreign == 1 and fresh.offers("site.test").selectors == {}
    assert fresh.adopt(learner.selectors()) == 1 and key in fresh.offers("site.test").selectors


def test_a_retirement_another_process_saved_is_taken():
    mine, key = learnt()
    theirs, _ = learnt()
    theirs.observe("site.test", key, "disagreed", None)
    mine.take_changes()
    assert mine.adopt(theirs.take_changes()) == 1
    assert not mine.active("site.test", key)
    offers = mine.offers("site.test")  # a page goes to a worker with it: the worker's own is set aside
    assert key not in offers.selectors and offers.retired == {key}


def offered(
    *selectors: Offer, parse: tuple[int, ...] = (), learn: tuple[int, ...] = (), parse_all: bool = False
) -> Offers:
    return Offers(
        {o.template: o for o in selectors}, learned.key_bits(parse), learned.key_bits(learn), parse_all=parse_all
    )


def test_the_pipeline_replays_checks_a_sampled_share_and_teaches_without_a_selector():
    learner, key = learnt()
    pipeline = DocumentPipeline(MinHashLSH(threshold=0.8), learn=True)
    page = templated_page(0, 55)
    pre = learned.prekey(page)
    unmet = pipeline.from_html(page, "https://site.test/a/55", offered())
    assert unmet.prekey == pre and unmet.template is None and unmet.lesson is None  # not parsed
    met = pipeline.from_html(page, "https://site.test/a/55", offered(parse=(pre,)))
    assert met.template == key and met.learned == "" and met.lesson is None  # parsed, counted, not teaching
    first = pipeline.from_html(page, "https://site.test/a/55", offered(parse=(pre,), learn=(key,)))
    assert first.template == key and first.learned == "" and first.lesson is not None
    offer = learner.offers("site.test").selectors[key]
    replayed = pipeline.from_html(
        page, "https://site.test/a/55", offered(Offer(key, offer.locator, offer.decisions, 0.0), parse=(pre,))
    )
    assert replayed.learned == "replayed" and replayed.lesson is None
    checked = pipeline.from_html(
        page, "https://site.test/a/55", offered(Offer(key, offer.locator, offer.decisions, 1.0), parse=(pre,))
    )
    assert checked.learned == "agreed" and checked.agreement >= learned.AGREEMENT
    assert checked.fingerprint is not None and first.fingerprint is not None
    assert checked.fingerprint.signature == first.fingerprint.signature  # trafilatura's text was filed
    similarity = pipeline.algorithm.similarity(replayed.fingerprint.signature, first.fingerprint.signature)
    assert similarity >= 0.9


def test_every_page_of_a_host_is_parsed_while_its_parsed_pages_find_selectors():
    # A crawl that starts warm knows the host's selectors but none of its pre-keys: every page is parsed, so
    # that the first page of each pre-key is replayed rather than sent to trafilatura unparsed.
    learner, key = learnt()  # three pages parsed, none with a selector yet
    assert learner.offers("site.test").parse_all and not learner.offers("other.test").parse_all
    other = learned.skeleton_key(learned.parse(templated_page(1, 0)))
    for _ in range(PARSE_ALL_TRIAL):  # pages of a template without a selector: parsing them found none
        learner.observe("site.test", other, "", None)
    assert not learner.offers("site.test").parse_all  # 19 parsed, none covered: the pre-key's gate again
    # A worker's own offers take the deciding process's word on it, which sees every page of the host.
    assert not Offers({}, (), (), parse_all=True).under(learner.offers("site.test")).parse_all
    for _ in range(18):
        learner.observe("site.test", key, "replayed", None)
    assert not learner.offers("site.test").parse_all  # 18 of 37
    learner.observe("site.test", key, "replayed", None)
    assert learner.offers("site.test").parse_all  # 19 of 38: half of the pages parsed found a selector
    assert Offers({}, (), ()).under(learner.offers("site.test")).parse_all
    learner.observe("site.test", key, "disagreed", None, agreement=0.0)  # retired: no selector left
    assert not learner.active("site.test", key) and not learner.offers("site.test").parse_all


def test_a_page_parsed_whatever_its_pre_key_is_replayed_or_counted_under_its_template():
    learner, key = learnt()
    pipeline = DocumentPipeline(MinHashLSH(threshold=0.8), learn=True)
    offer = learner.offers("site.test").selectors[key]
    selector = Offer(key, offer.locator, offer.decisions, 0.0)
    unmet = pipeline.from_html(templated_page(0, 56), "https://site.test/a/56", offered(selector))
    assert unmet.template is None and unmet.learned == ""  # the pre-key's gate: not parsed
    assert unmet.prekey == learned.prekey(templated_page(0, 56))
    got = pipeline.from_html(templated_page(0, 56), "https://site.test/a/56", offered(selector, parse_all=True))
    assert got.template == key and got.learned == "replayed"
    assert got.prekey is None  # every page parsed: the pre-key decides nothing, and is not read
    # A page of another template on that host: parsed, counted under its template, to trafilatura.
    other = pipeline.from_html(templated_page(1, 56), "https://site.test/b/56", offered(selector, parse_all=True))
    assert other.template not in (None, key) and other.learned == "" and other.lesson is None
    before = learner.offers("site.test").parse
    learner.observe("site.test", other.template, other.learned, other.lesson, other.prekey)
    assert learner.offers("site.test").parse == before  # no pre-key remembered from it


def test_the_guard_takes_one_article_in_two_templates_for_an_article_and_a_repeated_block_for_a_template():
    pipeline = DocumentPipeline(MinHashLSH(threshold=0.8), learn=True, with_page_text=True)
    guard = TemplateGuard(2, algorithm=pipeline.algorithm)
    # One article under two sections: its main text is at most half of each page, the page texts differ.
    crossposted = [
        pipeline.from_html(
            templated_page(t, 5, article_seed=5, footer_words=900), f"https://site.test/{t}/5", PARSE_ALL
        )
        for t in (0, 1)
    ]
    assert all(p.main_key is not None for p in crossposted)
    assert crossposted[0].main_key == crossposted[1].main_key and crossposted[0].template != crossposted[1].template
    assert [guard.decide(f"k{t}", f"https://site.test/{t}/5", p)[0].method for t, p in enumerate(crossposted)] == [
        "main",
        "main",
    ]
    # The same text for different articles of one template (a cookie wall): the template's text.
    walls = [
        p
        for p in (
            pipeline.from_html(
                templated_page(0, s, article_seed=900, footer_words=900), f"https://site.test/w/{s}", PARSE_ALL
            )
            for s in (1, 2)
        )
    ]
    methods = [guard.decide(f"w{i}", f"https://site.test/w/{i}", replace_page(p, i)) for i, p in enumerate(walls)]
    assert methods[-1][0].method == "template" and methods[-1][1]


def replace_page(prepared, i):
    """Around the same main text, the page text of a different article (what a template block looks like)."""
    from dataclasses import replace

    from helpers.sitegen import story

    page = MinHashLSH(threshold=0.8).fingerprint(story(300 + i, 900))
    return replace(prepared, page_fingerprint=page, page_sketch=page.signature)


def test_a_replay_refuses_a_page_whose_article_moved_into_a_block_the_template_drops():
    learner, key = learnt()
    offer = learner.offers("site.test").selectors[key]
    page = templated_page(0, 41).replace(
        "<div class='entry-content'><p>", "<div class='entry-content'><div class='share-bar'><p>"
    )
    assert learned.replay(learned.parse(page), offer) is None
    assert learned.replay(learned.parse(templated_page(0, 41)), offer) is not None


def test_a_block_at_a_path_lessons_decided_both_ways_is_kept_when_short_or_a_small_share_of_the_text():
    """Kept, such a block changes the text by at most its words whichever way trafilatura went: a short one
    always, a longer one while all of them hold at most ``1 - bound`` of the text's words."""
    decisions, conflicts = learned.merge({">p": True, ">h3": True}, frozenset(), {">p": True, ">h3": False})
    assert decisions == {">p": True} and conflicts == {">h3"}

    def replayed(heading: str, words: int = 80, bound: float = learned.AGREEMENT) -> str | None:
        body = "<p>" + " ".join(f"word{i}" for i in range(words)) + "</p>"
        tree = learned.parse(f"<html><body><article><h3>{heading}</h3>{body}</article></body></html>")
        return learned.replay_element(tree.css_first("article"), decisions, 0.0, conflicts, bound)

    assert replayed("A short subheading").startswith("A short subheading word0")
    author = "The author teaches bioethics at the medical faculty of the university and sits on national boards"
    assert len(author.split()) > learned.SHORT_CONFLICT_WORDS
    assert replayed(author) is None  # 16 words of 96
    assert replayed(author, words=400).startswith("The author teaches")  # 16 of 416: under 5 %
    assert replayed(author, words=400, bound=0.98) is None  # the bound the learner holds replays to
    body = "<p>" + " ".join(f"word{i}" for i in range(80)) + "</p>"
    tree = learned.parse(f"<html><body><article><h3>A short one</h3>{body}</article></body></html>")
    assert learned.replay_element(tree.css_first("article"), decisions) is None  # no conflict known: unknown


def test_a_worker_learns_from_its_own_pages_and_sets_them_aside_for_a_template_the_crawler_process_retired(
    monkeypatch,
):
    """A section page's articles reach the workers at once, before any has come back to teach the crawler
    process: each worker learns from the pages it extracts itself, and says which replays were its own. Once
    the crawler process retired the template's selector, the worker's own is not used for it: its pages go to
    trafilatura and teach, so that the template is learned again (a replay there would be extracted twice)."""
    import pickle

    from scrapy_neardup.engine.prepare import Prepared
    from scrapy_neardup.settings import Config
    from scrapy_neardup.workers import tasks as workers

    monkeypatch.setattr(workers, "_pipeline", None)
    monkeypatch.setattr(workers, "_local", None)
    workers.init_worker(Config.from_settings({"NEARDUP_ENABLED": True}), in_worker=False, learn_locally=True)
    nothing_offered = pickle.dumps(Offers({}, learned.key_bits([]), learned.key_bits([])))
    got = [
        Prepared.from_wire(
            workers.analyze_html(
                templated_page(0, i).encode(), f"https://site.test/a/{i}", "text/html; charset=utf-8", nothing_offered
            )
        )
        for i in range(14)
    ]
    how = [p.learned for p in got]
    assert how[:4] == ["", "", "", ""] and got[0].template is None  # unparsed, then three pages counted
    learned_at = 4 + learned.LESSONS  # then the lessons the defaults ask for
    assert all(p.lesson is not None for p in got[4:learned_at])
    by_selector = [p for p in got[learned_at:] if p.learned in ("replayed", "agreed")]
    assert len(by_selector) == 14 - learned_at and all(p.own_selector for p in by_selector), how
    assert not any(p.own_selector for p in got[:learned_at])
    key = got[learned_at].template
    retired_there = pickle.dumps(Offers({}, PARSE_ALL.parse, PARSE_ALL.parse, frozenset({key})))
    after = [
        Prepared.from_wire(
            workers.analyze_html(
                templated_page(0, i).encode(), f"https://site.test/a/{i}", "text/html; charset=utf-8", retired_there
            )
        )
        for i in range(14, 18)
    ]
    assert [p.learned for p in after] == ["", "", "", ""] and all(p.lesson is not None for p in after)
    assert all(p.template == key and not p.own_selector for p in after)
    still = Prepared.from_wire(
        workers.analyze_html(
            templated_page(0, 18).encode(), "https://site.test/a/18", "text/html; charset=utf-8", nothing_offered
        )
    )
    assert still.learned in ("replayed", "agreed") and still.own_selector  # nothing retired: its own again
