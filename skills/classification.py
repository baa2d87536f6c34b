"""Skill categories from sentence embeddings: a small trained classifier over labelled skills, Django-free.

A skill is represented by its embeddings added together: its "name: description" (the vector
ingest already stores for near-duplicate detection), the head of its body, where what the skill
actually does is spelled out, and the mean of the body's first three 1,000-character pieces of
prose (so a skill whose opening is boilerplate is still read further on). A multinomial logistic
regression is trained on the hand-labelled skills (`skills.labelled_sets`: their acceptable
alternatives at a lower weight), hand-written category examples (`labels/category_examples.json`)
and the taxonomy's own descriptions, and its probabilities are blended with the zero-shot
similarity to the category descriptions, which keeps categories with few labelled skills
reachable. A second, lexical model (TF-IDF of hashed words, word pairs and Chinese or Japanese
character pairs, logistic regression) reads the skill's own words, product and tool names the
sentence embedding blurs, and is blended in, and so is a prior from the services a skill is about
(`ServicePrior`, `service_categories.json`: names too rare in the labels to be learnt); the result is sharpened so the top category reads as
a confidence. A skill written mostly in Chinese or Japanese, which MiniLM cannot read, is embedded
through the English of its terms (`cjk_gloss`, `cjk_glossary.json`). Measured by
`bench/category_accuracy.py`.

Optional LLM stage (`llm_classify`): when an endpoint is configured, a skill goes to the model
with the taxonomy, the labelling guidelines and the embedding classifier's guess; calls go
through facet_site.lib.llm, so they are recorded, cached and replayable from a cassette.

Everything here takes texts, vectors, an `embed` callable or an LLM client, so it runs without
Django; the caller chooses the embedder (normally `skills.services.embed`). What the classifier
is trained on, and the production classifier itself, come from `skills.labelled_sets`.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from pydantic import BaseModel, Field

from facet_site.lib.llm import InvalidOutput, load_prompt

LABELS_DIR = Path(__file__).resolve().parent / "labels"
EXAMPLES_FILE = LABELS_DIR / "category_examples.json"
TAXONOMY_FILE = Path(__file__).resolve().parent / "taxonomy.json"
# English for Chinese and Japanese words that say what a skill is for (see cjk_gloss).
CJK_GLOSSARY_FILE = Path(__file__).resolve().parent / "cjk_glossary.json"
# Product and service names with the category their job gives a skill (see ServicePrior).
SERVICES_FILE = Path(__file__).resolve().parent / "service_categories.json"
PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
LLM_STAGE = "classify_category"

Embed = Callable[[list[str]], np.ndarray]

# Chosen by 5-fold cross-validation on the tuning part of the labelled set only (bench notes).
BODY_CHARS = 1000  # MiniLM reads ~256 tokens; more text in one piece is cut off anyway
BODY_PIECES = 3  # pieces of body prose averaged into the body vector: up to 2 embeddings more than the head
MIN_PIECE_CHARS = 200  # a shorter tail piece is mostly a closing line and would only add noise
ZERO_SHOT_WEIGHT = 0.3  # share of the blend given to similarity with category descriptions
ZERO_SHOT_TEMPERATURE = 0.05  # the same temperature ingest's zero-shot classifier uses
L2_C = 30.0  # inverse regularisation strength, as in scikit-learn's LogisticRegression(C=...)
# A labelled skill also trains its acceptable alternatives (`also`) at this weight: borderline
# skills then pull toward every category a careful reader accepts, not only the first one.
ALTERNATIVE_WEIGHT = 0.3
# The blended probabilities are too flat to read as "how likely is this right": raising them to
# this power and renormalising (temperature scaling) makes the confidence of the top category
# match how often it is the label, on cross-validation of the tuning part (bench --cv).
CONFIDENCE_SHARPNESS = 1.75
DESCRIPTION_REPEATS = 2  # each taxonomy description counts as this many labelled examples
# The lexical model: its share of the final blend, its inverse regularisation strength, and how much
# of the body it reads (all by cross-validation on the tuning part; bench/results/category_accuracy.md).
LEXICAL_WEIGHT = 0.35  # 0.25 until 2026-12-05: with the registry sample and character pairs, 0.35 by pooled CV
LEXICAL_C = 100.0
LEXICAL_BODY_CHARS = 3000
# The most frequent words and word pairs kept: 10,000 scores as well as 50,000 on cross-validation
# and trains in about half the time (training happens once per process).
LEXICAL_FEATURES = 10_000
# The service prior (ServicePrior): its share of the blend, how often a name must be in the lexical
# text to count (name and description are read twice, so 3 is "named up front and again in the body",
# or three times), and the share of labelled skills above which a name says nothing (or its hashed
# column is shared with a common term). By pooled cross-validation of the tuning parts (2026-12-07).
SERVICE_WEIGHT = 0.2
SERVICE_MIN_COUNT = 3
SERVICE_MAX_SHARE = 0.05
# A skill with fewer CJK characters than this is English with a name or two in it: no gloss.
CJK_GLOSS_MIN_CHARS = 20
# At most this many glossed terms; MiniLM reads ~256 tokens and the skill's own text follows.
CJK_GLOSS_TERMS = 30


@dataclass(frozen=True)
class Classification:
    category: str  # fine-grained slug from taxonomy.json
    confidence: float  # blended probability of `category`, in [0, 1]
    runner_up: str
    runner_up_confidence: float


# --- texts -------------------------------------------------------------------------------------

_FENCED = re.compile(r"```.*?```", re.S)
_URL = re.compile(r"https?://\S+")
_MARKUP = re.compile(r"[#*`|>_=~\-]+")
_SPACE = re.compile(r"\s+")


def body_head(body: str, limit: int = BODY_CHARS) -> str:
    """The prose at the start of a SKILL.md body: code blocks, URLs and Markdown markup dropped,
    because commands and tables say little about what the skill is for."""
    text = _FENCED.sub(" ", body or "")
    text = _URL.sub(" ", text)
    text = _MARKUP.sub(" ", text)
    return _SPACE.sub(" ", text).strip()[:limit]


def name_description_text(name: str, description: str) -> str:
    # The same text ingest embeds (skills.services.embedding_text), so its stored vector can be reused.
    return f"{name}: {description}".strip()


def body_pieces(body: str) -> list[str]:
    """The body's prose cut into up to BODY_PIECES pieces of BODY_CHARS; the first always, the
    others only when they carry at least MIN_PIECE_CHARS."""
    prose = body_head(body, BODY_CHARS * BODY_PIECES)
    pieces = [prose[i:i + BODY_CHARS] for i in range(0, len(prose), BODY_CHARS)]
    return pieces[:1] + [p for p in pieces[1:] if len(p) >= MIN_PIECE_CHARS]


# Hiragana and katakana, CJK ideographs (extension A, unified, compatibility): the characters
# cjk_gloss counts and a glossed skill's embedded text leaves out. Hangul is not among them: the
# glossary has no Korean, so a Korean skill is read as any other.
CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def _without_cjk(text: str) -> str:
    return _SPACE.sub(" ", CJK_CHAR.sub(" ", text or "")).strip()


@functools.lru_cache(maxsize=4)
def _glossary(path: Path = CJK_GLOSSARY_FILE) -> tuple[dict[str, str], re.Pattern]:
    terms = {t: en for group in json.loads(Path(path).read_text(encoding="utf-8"))["groups"].values()
             for t, en in group.items()}
    # longest first, so the regex takes "数据清洗" where it would otherwise take "数据"
    return terms, re.compile("|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True)))


def cjk_gloss(name: str, description: str, body: str, *, path: Path = CJK_GLOSSARY_FILE,
              min_chars: int = CJK_GLOSS_MIN_CHARS) -> str:
    """English for the glossary terms a mostly Chinese or Japanese skill uses, or "" for any other
    skill. MiniLM and the lexical model's word pattern read English only, so without it such a
    skill is classified on its few ASCII names and commands. Terms of the name and description
    come first, then the body's by how often they occur; each English gloss once."""
    head = f"{name or ''} {description or ''}"
    text = f"{head} {(body or '')[:LEXICAL_BODY_CHARS]}"
    if len(CJK_CHAR.findall(text)) < min_chars or not CJK_CHAR.search(text):
        return ""
    terms, pattern = _glossary(path)
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for m in pattern.finditer(text):
        en = terms[m.group()]
        counts[en] = counts.get(en, 0) + 1
        first.setdefault(en, m.start())
    in_head = {en for en, at in first.items() if at < len(head)}
    ranked = sorted(counts, key=lambda en: (en not in in_head, -counts[en], first[en]))
    return " ".join(ranked[:CJK_GLOSS_TERMS])


def lexical_text(name: str, description: str, body: str, gloss: str | None = None) -> str:
    """What the lexical model reads: name and description twice (they say what the skill is for, and
    the body is longer), then the start of the body as written, code included, since a command or
    a package name is often the clearest sign of what a skill does; then, for a Chinese or
    Japanese skill, the English of its terms (`cjk_gloss`; pass `gloss` when already computed)."""
    text = f"{name} {description} {name} {description} {(body or '')[:LEXICAL_BODY_CHARS]}"
    if gloss is None:
        gloss = cjk_gloss(name, description, body)
    return f"{text} {gloss}" if gloss else text


def combine(name_description_vectors: np.ndarray, *body_vectors: np.ndarray) -> np.ndarray:
    """One unit vector per skill from its embeddings, each weighted equally."""
    v = np.asarray(name_description_vectors, np.float32).copy()
    for b in body_vectors:
        v += np.asarray(b, np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms == 0, 1, norms)


def skill_vectors(
    embed: Embed, *, names: Sequence[str], descriptions: Sequence[str], bodies: Sequence[str],
    name_description_vectors: np.ndarray | None = None, glosses: Sequence[str] | None = None,
) -> np.ndarray:
    """Classifier input for skills; pass `name_description_vectors` when they are already embedded
    and `glosses` (`cjk_gloss` of each skill) when already computed."""
    if name_description_vectors is None:
        name_description_vectors = embed([name_description_text(n, d) for n, d in zip(names, descriptions)])
    # An empty body would embed as noise; the skill's name stands in for it.
    pieces = [body_pieces(b) for b in bodies]
    heads = [p[0] if p else n for n, p in zip(names, pieces)]
    # A Chinese or Japanese skill is read through the English of its terms (cjk_gloss): its head
    # and its "name: description" (embedded again, in place of ingest's vector) get the gloss in
    # front and lose their CJK characters, which MiniLM reads as near-noise that pulls every such
    # skill toward the same few categories; further pieces left with little else are dropped.
    if glosses is None:
        glosses = [cjk_gloss(n, d, b) for n, d, b in zip(names, descriptions, bodies)]
    glossed = [i for i, g in enumerate(glosses) if g]
    if glossed:
        name_description_vectors = np.asarray(name_description_vectors, np.float32).copy()
        name_description_vectors[glossed] = embed([
            f"{names[i]}: {cjk_gloss(names[i], descriptions[i], '', min_chars=0) or glosses[i]}. "
            f"{_without_cjk(descriptions[i])}" for i in glossed])
        for i in glossed:
            heads[i] = f"{glosses[i]}. {_without_cjk(heads[i])}"
            pieces[i] = pieces[i][:1] + [t for t in map(_without_cjk, pieces[i][1:]) if len(t) >= MIN_PIECE_CHARS]
    further = [(i, text) for i, p in enumerate(pieces) for text in p[1:]]
    embedded = np.asarray(embed(heads + [t for _, t in further]), np.float32)  # one batch for the model
    head_vectors = embedded[:len(heads)]
    # The body vector is the mean of the head and the further pieces: the head counts twice in
    # the sum, as the part that most often says what the skill is for.
    body_vectors = head_vectors.copy()
    counts = np.ones(len(pieces), np.float32)
    for (i, _), v in zip(further, embedded[len(heads):]):
        body_vectors[i] += v
        counts[i] += 1
    body_vectors /= counts[:, None]
    return combine(name_description_vectors, head_vectors, body_vectors)


# --- data files --------------------------------------------------------------------------------


def taxonomy_categories(path: Path = TAXONOMY_FILE) -> list[dict]:
    """Fine-grained categories in taxonomy order, each with its `family` (the parent's slug)."""
    data = json.loads(Path(path).read_text())
    return [dict(child, family=top["slug"]) for top in data["categories"] for child in top.get("children", [])]


def category_example_texts(path: Path = EXAMPLES_FILE) -> dict[str, list[str]]:
    return json.loads(Path(path).read_text())["examples"]


# --- the model ---------------------------------------------------------------------------------


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def fit_softmax_regression(
    x: np.ndarray, y: np.ndarray, n_classes: int, *, c: float = L2_C, iterations: int = 600,
    sample_weight: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression with an L2 penalty on the weights, by Nesterov-accelerated
    gradient descent. Rows of `x` are unit vectors and weights are at most 1, which bounds the
    curvature and lets a fixed step size converge; a few hundred examples train in about a second."""
    n, d = x.shape
    onehot = np.zeros((n, n_classes), np.float64)
    onehot[np.arange(n), y] = 1.0
    if sample_weight is not None:
        onehot *= np.asarray(sample_weight, np.float64)[:, None]
    row_weight = onehot.sum(axis=1, keepdims=True)  # a weighted row's target is w·onehot, its prediction w·softmax
    lam = 1.0 / (c * n)
    w = np.zeros((d, n_classes)); b = np.zeros(n_classes)
    w_prev, b_prev = w.copy(), b.copy()
    step = 2.0
    xd = x.astype(np.float64)
    for t in range(1, iterations + 1):
        mom = (t - 1) / (t + 2)
        wl, bl = w + mom * (w - w_prev), b + mom * (b - b_prev)
        grad = (_softmax(xd @ wl + bl) * row_weight - onehot) / n
        w_prev, b_prev = w, b
        w = wl - step * (xd.T @ grad + lam * wl)
        b = bl - step * grad.sum(axis=0)
    return w, b


_WORD = re.compile(r"(?u)\b[a-zA-Z][a-zA-Z0-9_+.-]{1,}\b")  # words and names such as "ffmpeg", "yt-dlp", "next.js"
_CJK_RUN = re.compile(CJK_CHAR.pattern + "+")
# Terms are hashed into this many columns, so what is stored of a labelled skill is a row of counts,
# not its text; at 2**20 columns two of the ~300,000 distinct terms of the labelled sets rarely share one.
LEXICAL_HASH_COLUMNS = 2 ** 20


def lexical_terms(text: str) -> list[str]:
    """The terms the lexical model counts: lower-cased words and names, pairs of neighbouring words,
    and pairs of neighbouring Chinese or Japanese characters (such text has no spaces, and a pair such
    as 股票 "stock" or 视频 "video" carries the meaning the glossary may not have)."""
    words = _WORD.findall((text or "").lower())
    terms = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
    for run in _CJK_RUN.findall(text or ""):
        terms += [run[i:i + 2] for i in range(len(run) - 1)] if len(run) > 1 else [run]
    return terms


def lexical_counts(texts: Sequence[str]):
    """(n_texts, LEXICAL_HASH_COLUMNS) sparse counts of each text's `lexical_terms`."""
    from sklearn.feature_extraction.text import HashingVectorizer

    hashing = HashingVectorizer(analyzer=lexical_terms, n_features=LEXICAL_HASH_COLUMNS, alternate_sign=False,
                                norm=None, dtype=np.float64)
    return hashing.transform(list(texts)).tocsr()


@dataclass
class LexicalModel:
    """TF-IDF over the hashed term counts of `lexical_counts` (the LEXICAL_FEATURES most frequent terms
    seen in at least two labelled skills), fed to a multinomial logistic regression (scikit-learn).
    Categories no labelled skill has get probability 0 here; the embedding side keeps them reachable."""
    columns: np.ndarray  # the hashed columns kept
    tfidf: object
    regression: object
    n_classes: int

    @classmethod
    def train(cls, counts, labels: Sequence[int], n_classes: int, *, extra: Sequence[tuple[int, int]] = (),
              extra_weight: float = ALTERNATIVE_WEIGHT, c: float = LEXICAL_C) -> "LexicalModel":
        """`counts` from `lexical_counts`, one row per labelled skill; `extra` holds (row, label) pairs
        trained again at `extra_weight`: the acceptable alternatives."""
        from scipy import sparse
        from sklearn.feature_extraction.text import TfidfTransformer
        from sklearn.linear_model import LogisticRegression

        counts = sparse.csc_matrix(counts)
        seen_in = np.asarray((counts > 0).sum(axis=0)).ravel()
        total = np.asarray(counts.sum(axis=0)).ravel()
        columns = np.flatnonzero(seen_in >= 2)
        columns = np.sort(columns[np.argsort(-total[columns], kind="stable")][:LEXICAL_FEATURES])
        kept = counts[:, columns]
        tfidf = TfidfTransformer(sublinear_tf=True).fit(kept)
        x = tfidf.transform(kept).tocsr()
        y, weights = list(labels), [1.0] * len(labels)
        if extra and extra_weight > 0:
            x = sparse.vstack([x, x[[i for i, _ in extra]]])
            y += [k for _, k in extra]
            weights += [extra_weight] * len(extra)
        # newton-cg needs ~10 steps where lbfgs needs ~90 and is several times faster here; a looser
        # tolerance than the default moves no cross-validated figure by more than a skill or two
        regression = LogisticRegression(C=c, solver="newton-cg", tol=1e-3, max_iter=500)
        regression.fit(x, y, sample_weight=weights)
        return cls(columns=columns, tfidf=tfidf, regression=regression, n_classes=n_classes)

    def probabilities(self, counts) -> np.ndarray:
        from scipy import sparse

        out = np.zeros((counts.shape[0], self.n_classes))
        if counts.shape[0]:
            x = self.tfidf.transform(sparse.csc_matrix(counts)[:, self.columns])
            out[:, self.regression.classes_] = self.regression.predict_proba(x)
        return out


@dataclass
class ServicePrior:
    """What the product and service names a skill is about say of its category (`SERVICES_FILE`):
    the guidelines put a skill that wraps one service where the service's job goes, and a name seen
    in one or two labelled skills teaches the lexical model nothing. A skill whose lexical text holds
    a listed name at least SERVICE_MIN_COUNT times gets, from each such name, an equal share of a
    prior on that name's category; a skill that names none gets no prior. Names are found in the same
    hashed term counts the lexical model reads (`lexical_counts`), so the labelled sets' stored
    features serve too."""
    columns: np.ndarray  # hashed column of each kept name
    categories: np.ndarray  # index of each kept name's category
    n_classes: int

    @classmethod
    def load(cls, slugs: Sequence[str], labelled_counts, *, path: Path = SERVICES_FILE,
             max_share: float = SERVICE_MAX_SHARE) -> "ServicePrior":
        """The names of `path` whose category is in `slugs`, less those found in more than `max_share`
        of the labelled skills (`labelled_counts`, one row each)."""
        index = {s: i for i, s in enumerate(slugs)}
        pairs = [(name, index[slug]) for slug, names in json.loads(Path(path).read_text(encoding="utf-8"))["categories"].items()
                 if slug in index for name in names]
        columns = np.array([_term_column(name) for name, _ in pairs], dtype=np.int64)
        categories = np.array([k for _, k in pairs], dtype=np.int64)
        if len(columns) and labelled_counts is not None and labelled_counts.shape[0]:
            share = np.asarray((labelled_counts[:, columns] > 0).sum(axis=0)).ravel() / labelled_counts.shape[0]
            columns, categories = columns[share <= max_share], categories[share <= max_share]
        return cls(columns=columns, categories=categories, n_classes=len(slugs))

    def probabilities(self, counts, *, min_count: int = SERVICE_MIN_COUNT) -> tuple[np.ndarray, np.ndarray]:
        """(prior, named): each row's prior over the categories, and whether the skill names any listed service."""
        prior = np.zeros((counts.shape[0], self.n_classes))
        if len(self.columns) and counts.shape[0]:
            hits = np.asarray((counts[:, self.columns] >= min_count).todense())
            for j in range(len(self.columns)):
                prior[hits[:, j], self.categories[j]] += 1.0
        total = prior.sum(axis=1)
        named = total > 0
        prior[named] /= total[named, None]
        return prior, named


def _term_column(term: str) -> int:
    """The hashed column `lexical_counts` puts `term` in."""
    from sklearn.feature_extraction.text import HashingVectorizer

    hashing = HashingVectorizer(analyzer=lambda t: [t], n_features=LEXICAL_HASH_COLUMNS, alternate_sign=False, norm=None)
    return int(hashing.transform([term]).indices[0])


@dataclass
class Classifier:
    slugs: list[str]
    families: dict[str, str]  # slug -> family slug
    description_vectors: np.ndarray  # (n_categories, dim), unit rows
    weights: np.ndarray
    bias: np.ndarray
    zero_shot_weight: float = ZERO_SHOT_WEIGHT
    sharpness: float = CONFIDENCE_SHARPNESS
    lexical: LexicalModel | None = None  # None when trained without texts or counts
    lexical_weight: float = LEXICAL_WEIGHT
    services: ServicePrior | None = None  # None when trained without texts or counts
    service_weight: float = SERVICE_WEIGHT

    @classmethod
    def train(
        cls, embed: Embed, *, vectors: np.ndarray | None = None, categories: Sequence[str] = (),
        alternatives: Sequence[Sequence[str]] = (), categories_meta: list[dict] | None = None,
        example_texts: dict[str, list[str]] | None = None, c: float = L2_C,
        zero_shot_weight: float = ZERO_SHOT_WEIGHT, alternative_weight: float = ALTERNATIVE_WEIGHT,
        sharpness: float = CONFIDENCE_SHARPNESS, texts: Sequence[str] | None = None, counts=None,
        lexical_weight: float = LEXICAL_WEIGHT, lexical_c: float = LEXICAL_C, service_weight: float = SERVICE_WEIGHT,
    ) -> "Classifier":
        """Train on labelled skill `vectors` (from `skill_vectors`) with their `categories` (and,
        at `alternative_weight`, their acceptable `alternatives`, one sequence per skill), plus the
        taxonomy descriptions and the hand-written category examples (embedded here). With the
        labelled skills' `texts` (`lexical_text`, one per vector), or their term `counts` (`lexical_counts`
        of those texts, as stored for the labelled sets), the lexical model is trained too."""
        meta = categories_meta if categories_meta is not None else taxonomy_categories()
        examples = example_texts if example_texts is not None else category_example_texts()
        slugs = [m["slug"] for m in meta]
        index = {s: i for i, s in enumerate(slugs)}
        descriptions = embed([f"{m['name']}. {m['description']}" for m in meta])
        ex_pairs = [(slug, text) for slug, texts in examples.items() if slug in index for text in texts]
        ex_vectors = embed([t for _, t in ex_pairs]) if ex_pairs else np.zeros((0, descriptions.shape[1]), np.float32)
        parts = [descriptions] * DESCRIPTION_REPEATS + [ex_vectors]
        labels = [np.arange(len(slugs))] * DESCRIPTION_REPEATS + [np.array([index[s] for s, _ in ex_pairs], int)]
        weights = [np.ones(len(p)) for p in parts]
        if vectors is not None and len(categories):
            vectors = np.asarray(vectors, np.float32)
            parts.append(vectors)
            labels.append(np.array([index[s] for s in categories], int))
            weights.append(np.ones(len(vectors)))
            extra = [(i, index[s]) for i, alts in enumerate(alternatives) for s in alts if s in index]
            if extra and alternative_weight > 0:
                parts.append(vectors[[i for i, _ in extra]])
                labels.append(np.array([k for _, k in extra], int))
                weights.append(np.full(len(extra), alternative_weight))
        w, b = fit_softmax_regression(np.vstack(parts), np.concatenate(labels), len(slugs), c=c,
                                      sample_weight=np.concatenate(weights))
        if counts is None and texts is not None:
            counts = lexical_counts(texts)
        lexical = services = None
        if counts is not None and len(categories) and service_weight > 0:
            services = ServicePrior.load(slugs, counts)
        if counts is not None and len(categories) and lexical_weight > 0:
            if counts.shape[0] != len(categories):
                raise ValueError(f"{counts.shape[0]} texts for {len(categories)} labelled skills")
            lexical = LexicalModel.train(
                counts, [index[s] for s in categories], len(slugs), extra_weight=alternative_weight, c=lexical_c,
                extra=[(i, index[s]) for i, alts in enumerate(alternatives) for s in alts if s in index])
        return cls(slugs=slugs, families={m["slug"]: m["family"] for m in meta}, description_vectors=descriptions,
                   weights=w, bias=b, zero_shot_weight=zero_shot_weight, sharpness=sharpness,
                   lexical=lexical, lexical_weight=lexical_weight, services=services, service_weight=service_weight)

    def probabilities(self, vectors: np.ndarray, texts: Sequence[str] | None = None, *, counts=None) -> np.ndarray:
        """(n_skills, n_categories) blended, then sharpened probabilities; each row sums to 1.
        `texts` (`lexical_text` of each skill), or their `counts`, bring in the lexical model and the
        service prior when they were trained."""
        v = np.asarray(vectors, np.float64)
        if len(v) == 0:
            return np.zeros((0, len(self.slugs)))
        trained = _softmax(v @ self.weights + self.bias)
        zero_shot = _softmax((v @ self.description_vectors.T) / ZERO_SHOT_TEMPERATURE)
        blended = (1 - self.zero_shot_weight) * trained + self.zero_shot_weight * zero_shot
        if (self.lexical is not None or self.services is not None) and (texts is not None or counts is not None):
            if counts is None:
                counts = lexical_counts(texts)
            if counts.shape[0] != len(v):
                raise ValueError(f"{counts.shape[0]} texts for {len(v)} vectors")
            if self.lexical is not None:
                blended = (1 - self.lexical_weight) * blended + self.lexical_weight * self.lexical.probabilities(counts)
            if self.services is not None:
                prior, named = self.services.probabilities(counts)
                blended[named] = (1 - self.service_weight) * blended[named] + self.service_weight * prior[named]
        if self.sharpness == 1.0:
            return blended
        sharpened = blended ** self.sharpness  # the order of categories is unchanged
        return sharpened / sharpened.sum(axis=1, keepdims=True)

    def classify(self, vectors: np.ndarray, texts: Sequence[str] | None = None, *, counts=None) -> list[Classification]:
        probs = self.probabilities(vectors, texts, counts=counts)
        out = []
        for row in probs:
            first, second = np.argsort(-row)[:2]
            out.append(Classification(
                category=self.slugs[first], confidence=round(float(row[first]), 4),
                runner_up=self.slugs[second], runner_up_confidence=round(float(row[second]), 4),
            ))
        return out


def classify(
    embed: Embed, *, names: Sequence[str], descriptions: Sequence[str], bodies: Sequence[str],
    classifier: Classifier, name_description_vectors: np.ndarray | None = None,
) -> list[Classification]:
    """Category, confidence and runner-up for each skill; pass `name_description_vectors` when
    they are already embedded (ingest has them from near-duplicate detection)."""
    glosses = [cjk_gloss(n, d, b) for n, d, b in zip(names, descriptions, bodies)]
    vectors = skill_vectors(embed, names=names, descriptions=descriptions, bodies=bodies,
                            name_description_vectors=name_description_vectors, glosses=glosses)
    return classifier.classify(vectors, [lexical_text(n, d, b, gloss) for n, d, b, gloss
                                         in zip(names, descriptions, bodies, glosses)])


# --- optional LLM stage ------------------------------------------------------------------------


class LLMCategory(BaseModel):
    category: str
    confidence: float = Field(ge=0, le=1)
    reason: str = ""


def labelling_guidelines(path: Path = LABELS_DIR / "README.md") -> str:
    """The README's guideline bullets: the model is held to the rules the labels follow."""
    text = Path(path).read_text()
    section = text.split("## Labelling guidelines", 1)[-1]
    return "\n".join(line for line in section.splitlines() if line.startswith(("- ", "  ")))


def llm_classify(
    client, *, subject: str, name: str, description: str, body: str, hint: Classification,
    categories_meta: list[dict] | None = None,
) -> Classification:
    """One skill through the LLM stage: `client` is a facet_site.lib.llm.LLMClient (records, caches
    and replays from a cassette by stage and `subject`, e.g. "skill:42"); `hint` is the embedding
    classifier's answer, passed on as a hint and kept as the runner-up. An answer outside the
    taxonomy raises InvalidOutput, which the caller records and falls back to `hint` on."""
    meta = categories_meta if categories_meta is not None else taxonomy_categories()
    slugs = {m["slug"] for m in meta}
    prompt = load_prompt(PROMPTS_DIR, LLM_STAGE)
    messages = prompt.messages(
        categories="\n".join(f"{m['slug']}: {m['name']}: {m['description']}" for m in meta),
        guidelines=labelling_guidelines(), name=name, description=description, body=body_head(body, 2000),
        candidates=f"{hint.category} ({hint.confidence:.2f}), {hint.runner_up} ({hint.runner_up_confidence:.2f})",
    )
    result = client.complete(stage=LLM_STAGE, subject=subject, prompt_version=prompt.version,
                             messages=messages, schema=LLMCategory)
    answer = result.parsed
    if answer.category not in slugs:
        raise InvalidOutput(f"category {answer.category!r} is not a taxonomy slug",
                            raw_text=getattr(result.record, "response_text", ""), record=result.record)
    runner_up = hint.category if hint.category != answer.category else hint.runner_up
    runner_conf = hint.confidence if hint.category != answer.category else hint.runner_up_confidence
    return Classification(category=answer.category, confidence=round(answer.confidence, 4),
                          runner_up=runner_up, runner_up_confidence=runner_conf)
