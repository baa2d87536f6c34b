"""The labelled skills the category classifier learns from and is measured against, what is stored
of them, and the production classifier trained on them. Django-free.

Two labelled sets (labels/README.md says how each was drawn and labelled):

- the corpus sample (`openclaw-categories.jsonl`): all 731 readable skills of
  ../shared/corpus/openclaw-sample, ids as facet_site.lib.skillformat.discover yields them;
- the registry sample (`registry-sample.jsonl`): real public skills the corpus does not hold (later
  uploads to ClawHub, and a public collection of scientific skills), ids "<source>:<path>", each
  labelled before any classifier was run on it.

Each set is split into a tuning and a held-out part by a hash of the id. What the classifier reads
of a labelled skill (`classification.skill_vectors` and the `classification.lexical_counts` of its
`lexical_text`) is stored beside the labels (`*.features.npz`), so the classifier trains where
neither the corpus nor the registries are at hand. Nothing else of a skill is stored: no text.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from skills import classification as cl

LABELS_DIR = cl.LABELS_DIR
CORPUS_LABELS = LABELS_DIR / "openclaw-categories.jsonl"
CORPUS_FEATURES = LABELS_DIR / "openclaw-categories.features.npz"
REGISTRY_LABELS = LABELS_DIR / "registry-sample.jsonl"
REGISTRY_FEATURES = LABELS_DIR / "registry-sample.features.npz"
# set name -> (labels, features); the order is the order rows are trained in
LABELLED_SETS = {"corpus": (CORPUS_LABELS, CORPUS_FEATURES), "registry": (REGISTRY_LABELS, REGISTRY_FEATURES)}
# A registry-sample skill is held out when sha256(salt + id) % 3 == 0, as the corpus sample's split is
# made (bench/category_accuracy.py, "facet-labels-15:"), with a salt of its own.
REGISTRY_SPLIT_SALT = "facet-registry-15:"
SECOND_READER_FILES = {"corpus": LABELS_DIR / "second-reader.jsonl",
                       "registry": LABELS_DIR / "registry-sample.second-reader.jsonl"}

# Scientific skills written for a sanity check (the corpus has almost none): see labels/README.md.
# Three rounds of them, by what each was used for: the first two guided which scientific category
# examples were written; the third was written, labelled and scored once after the last change.
SCIENCE_PROBES = {
    "science_probe": LABELS_DIR / "science-probe.jsonl",
    "science_probe_2": LABELS_DIR / "science-probe-2.jsonl",
    "science_probe_3_blind": LABELS_DIR / "science-probe-3.jsonl",
}
# Chinese and Japanese skills written for the same kind of check (labels/README.md): the first
# guided the glossary (cjk_glossary.json); the second was scored once, after it was written.
CJK_PROBES = {
    "chinese_probe_1": LABELS_DIR / "chinese-probe-1.jsonl",
    "chinese_probe_2_blind": LABELS_DIR / "chinese-probe-2.jsonl",
}


@dataclass(frozen=True)
class LabelledSkill:
    id: str
    category: str
    also: tuple[str, ...] = ()
    split: str = "tune"
    source: str = "corpus"  # "corpus", or the registry sample's source ("clawhub", "science")

    def accepts(self, slug: str) -> bool:
        return slug == self.category or slug in self.also


def registry_split(skill_id: str) -> str:
    return "heldout" if int(hashlib.sha256(f"{REGISTRY_SPLIT_SALT}{skill_id}".encode()).hexdigest(), 16) % 3 == 0 else "tune"


def load_labelled(path: Path = CORPUS_LABELS) -> list[LabelledSkill]:
    """One set's rows in file order; a registry-sample row's source is its id's prefix."""
    rows = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows.append(LabelledSkill(id=r["id"], category=r["category"], also=tuple(r.get("also", ())),
                                      split=r["split"], source=r["id"].split(":", 1)[0] if ":" in r["id"] else "corpus"))
    return rows


def load_all_labelled() -> list[LabelledSkill]:
    """Every labelled skill of every set (LABELLED_SETS), corpus first."""
    return [row for labels, _ in LABELLED_SETS.values() for row in load_labelled(labels)]


def load_probe(path: Path) -> list[tuple[LabelledSkill, dict]]:
    """A probe of hand-written skills (SCIENCE_PROBES, CJK_PROBES) with their labels:
    (label, {name, description, body})."""
    out = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            out.append((LabelledSkill(id=r["name"], category=r["category"], also=tuple(r.get("also", ())), split="probe",
                                      source="probe"),
                        {k: r[k] for k in ("name", "description", "body")}))
    return out


def labels_digest(path: Path = CORPUS_LABELS) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


# --- stored features ----------------------------------------------------------------------------


@dataclass
class Features:
    """What the classifier reads of labelled skills: unit vectors and hashed term counts, row i of
    each for ids[i]."""
    ids: list[str]
    vectors: np.ndarray
    counts: object  # scipy.sparse.csr_matrix, (len(ids), classification.LEXICAL_HASH_COLUMNS)
    signature: str  # the embedder's (facet_site.lib.embedding.Embedder.signature)

    def rows(self, ids: Sequence[str]) -> tuple[np.ndarray, object]:
        where = {i: k for k, i in enumerate(self.ids)}
        missing = [i for i in ids if i not in where]
        if missing:
            raise KeyError(f"no stored features for {len(missing)} labelled skills, e.g. {missing[0]!r}")
        at = [where[i] for i in ids]
        return self.vectors[at], self.counts[at]

    @classmethod
    def merge(cls, parts: Iterable["Features"]) -> "Features":
        from scipy import sparse

        parts = list(parts)
        return cls(ids=[i for p in parts for i in p.ids], vectors=np.vstack([p.vectors for p in parts]),
                   counts=sparse.vstack([p.counts for p in parts]).tocsr(), signature=parts[0].signature)


def save_features(path: Path, *, ids: Sequence[str], vectors: np.ndarray, counts, signature: str,
                  labels_path: Path) -> None:
    """Rows sorted by id; float16 vectors (half the file, no accuracy lost) and uint16 counts."""
    from scipy import sparse

    order = np.argsort(np.array(ids, dtype=object), kind="stable")
    counts = sparse.csr_matrix(counts)[order]
    counts.sort_indices()
    if counts.nnz and counts.data.max() > np.iinfo(np.uint16).max:
        raise ValueError(f"{path.name}: a term count is over {np.iinfo(np.uint16).max}")
    np.savez_compressed(
        path, ids=np.array([ids[i] for i in order]), vectors=np.asarray(vectors)[order].astype(np.float16),
        counts_data=counts.data.astype(np.uint16), counts_indices=counts.indices.astype(np.int32),
        counts_indptr=counts.indptr.astype(np.int64), columns=np.array(counts.shape[1]),
        signature=np.array(signature), labels=np.array(labels_digest(labels_path)))


def load_features(path: Path) -> Features:
    from scipy import sparse

    with np.load(path) as data:
        ids = [str(i) for i in data["ids"]]
        counts = sparse.csr_matrix((data["counts_data"].astype(np.float64), data["counts_indices"], data["counts_indptr"]),
                                   shape=(len(ids), int(data["columns"])))
        return Features(ids=ids, vectors=data["vectors"].astype(np.float32), counts=counts, signature=str(data["signature"]))


def load_all_features() -> Features:
    return Features.merge(load_features(features) for _, features in LABELLED_SETS.values())


# --- the production classifier ------------------------------------------------------------------


def train_default(embed: Callable, features: Features, *, rows: Sequence[LabelledSkill] | None = None,
                  exclude: Iterable[str] = ()) -> cl.Classifier:
    """Trained on `rows` (every labelled skill of every set when None) minus `exclude` (the held-out
    ids when measuring), from their stored `features`."""
    skip = set(exclude)
    rows = [r for r in (load_all_labelled() if rows is None else rows) if r.id not in skip]
    vectors, counts = features.rows([r.id for r in rows])
    return cl.Classifier.train(embed, vectors=vectors, categories=[r.category for r in rows],
                               alternatives=[r.also for r in rows], counts=counts)


def default_classifier(embed: Callable) -> cl.Classifier:
    """Trained on every labelled skill of every set; vectors of another backend of the same model
    differ by ~1% in cosine, which the classifier does not notice."""
    return train_default(embed, load_all_features())
