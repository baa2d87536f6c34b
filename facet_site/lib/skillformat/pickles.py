"""What a pickle file would import when it is loaded, read without loading it. Django-free.

Why: a pickle is a program. Loading it (`pickle.load`, `joblib.load`, `torch.load` without
`weights_only`, `numpy.load(allow_pickle=True)`) calls whatever its GLOBAL opcodes name, so a
"model" or "lexicon" file in a skill can run `os.system` the moment the skill's script opens it,
and no text rule sees it: its bytes are not text. picklescan (the scanner Hugging Face runs on
model uploads) lists those imports from the opcodes and marks the ones that run code or reach the
system as dangerous; the safety scan's `pickle-code` file rule reports them.

Which files: those whose first bytes are a pickle's PROTO opcode (protocol 2 to 5, as every
pickle written by Python 3 starts), those named like one (`.pkl`, `.pickle`, `.joblib`: protocol
0 and 1 have no first bytes to know them by), NumPy `.npy` files (object arrays are pickles after
the header), and such members of a zip (a PyTorch checkpoint is a zip holding `data.pkl`). Reading
is capped at PICKLE_BYTES: a pickle's imports come before the data they rebuild.
"""
from __future__ import annotations

import heapq
import io
import logging
import pickletools
from dataclasses import dataclass

from picklescan.scanner import SafetyLevel, scan_numpy, scan_pickle_bytes

__all__ = ["PICKLE_BYTES", "MAX_OPCODES", "PickleImport", "looks_like_pickle", "read_pickle"]

PICKLE_BYTES = 16_000_000  # of one pickle (file or archive member): more is not read
# picklescan keeps every opcode of the stream in a list: 16 MB of one-byte opcodes would be 16 million
# entries (gigabytes). Past this many the stream is cut where the next opcode starts. A model's
# pickle of arrays has a few thousand; a large vocabulary a few hundred thousand.
MAX_OPCODES = 300_000
_NAMED_EXTS = frozenset({"pkl", "pickle", "joblib"})
_NUMPY_MAGIC = b"\x93NUMPY"
_STRINGS_SHOWN = 3
_STRING_CHARS = 200
_STRING_OPS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING",
                         "SHORT_BINSTRING"})

# picklescan logs each dangerous import and each unreadable stream as a warning; here they are
# findings of the scan (or, for data that only starts like a pickle, nothing), not log lines.
logging.getLogger("picklescan").setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class PickleImport:
    where: str  # the file, or "archive!member"
    module: str
    name: str
    dangerous: bool  # runs code or reaches the system when loaded (picklescan's "dangerous")

    @property
    def qualified(self) -> str:
        return f"{self.module}.{self.name}"


def looks_like_pickle(name: str, head: bytes) -> bool:
    """`head` (a file's first bytes) starts like a pickle or a NumPy array file, or `name` ends
    like a pickle."""
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return True
    if head.startswith(_NUMPY_MAGIC):
        return True
    base = name.rsplit("/", 1)[-1].lower()
    return "." in base and base.rsplit(".", 1)[-1] in _NAMED_EXTS


def read_pickle(where: str, data: bytes) -> tuple[tuple[PickleImport, ...], tuple[str, ...]]:
    """What loading the pickle in `data` imports, dangerous first, and, when one of those is
    dangerous, the strings it carries as evidence; the stream is bounded once (PICKLE_BYTES,
    MAX_OPCODES)."""
    bounded = _bounded(data[:PICKLE_BYTES])
    imports = _imports(where, bounded)
    return imports, (_strings(bounded) if any(i.dangerous for i in imports) else ())


def _imports(where: str, data: bytes) -> tuple[PickleImport, ...]:
    """The globals the (bounded) pickle in `data` imports when loaded, dangerous first; () for data that is not a pickle or names nothing. A stream cut short or damaged still
    gives the imports read before the damage: it can run up to there."""
    stream = io.BytesIO(data)
    try:
        if data.startswith(_NUMPY_MAGIC):
            result = scan_numpy(stream, where)
        else:
            result = scan_pickle_bytes(stream, where)
    except Exception:  # noqa: BLE001 - hostile bytes: a header numpy refuses, a memo picklescan cannot follow
        return ()
    found = {(g.module, g.name): g.safety == SafetyLevel.Dangerous for g in result.globals}
    return tuple(sorted((PickleImport(where, module, name, dangerous) for (module, name), dangerous in found.items()),
                        key=lambda i: (not i.dangerous, i.module, i.name)))


def _strings(data: bytes) -> tuple[str, ...]:
    """The longest strings the pickle carries (at most three, each cut to 200 characters): the
    argument a dangerous import is called with is usually one, which is the evidence a reviewer
    reads."""
    def strings():
        try:
            for op, arg, _ in pickletools.genops(io.BytesIO(data)):
                if op.name in _STRING_OPS and isinstance(arg, (str, bytes)) and len(arg) >= 12:
                    yield arg if isinstance(arg, str) else arg.decode("latin-1")
        except Exception:  # noqa: BLE001 - the strings before the damage are kept
            return

    found = heapq.nlargest(_STRINGS_SHOWN, strings(), key=len)
    return tuple(s[:_STRING_CHARS] for s in found)


def _bounded(data: bytes) -> bytes:
    """`data` up to the start of its MAX_OPCODES-th opcode (a NumPy file's header counted as none),
    or whole when it has fewer or stops being a pickle first."""
    if data.startswith(_NUMPY_MAGIC):
        return data  # scan_numpy reads the header itself; its pickle, if any, is bounded by PICKLE_BYTES
    try:
        for count, (_, _, pos) in enumerate(pickletools.genops(io.BytesIO(data))):
            if count >= MAX_OPCODES and pos is not None:
                return data[:pos]
    except Exception:  # noqa: BLE001 - damaged: picklescan reads up to the damage itself
        pass
    return data
