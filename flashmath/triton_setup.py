"""What the Triton kernels' wrappers share (chapters 11 and 12): the switch to Triton's interpreter where there is no
GPU, the install commands of the ``triton`` extra, and the checks and conversions of their arguments.

Importing this module (which :mod:`flashmath.triton_kernel` and :mod:`flashmath.triton_backward` do first) sets
``TRITON_INTERPRET=1`` on a machine without a CUDA device, unless that variable is already set; Triton must not have
been imported before, since it reads the variable when its functions are defined (:func:`too_late` tells). Without
PyTorch or Triton the module still imports; :func:`require_triton` and :func:`require_extra` then explain.
``import flashmath`` never imports this module.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings

import numpy as np

from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.inputs import AttentionInputs, prepare_attention_inputs

__all__ = [
    "TORCH_VERSION",
    "INSTALL_COMMANDS",
    "INSTALL_HINT",
    "install_hint",
    "DEFAULT_BLOCK_M",
    "DEFAULT_BLOCK_N",
    "MAX_HEAD_DIM",
    "FLOAT32_SCALES",
    "ExtraNotInstalled",
    "available",
    "interpreted",
    "too_late",
    "require_triton",
    "require_extra",
    "padded_width",
    "stand_in",
    "check_kernel_inputs",
    "kernel_device",
    "quiet_interpreter",
    "as_tensor",
    "rule_blocks",
]

TORCH_VERSION = "2.13.0"
"""The PyTorch release the stored outputs of chapter 11 were made with (README.md's command pins it too)."""
INSTALL_COMMANDS = (
    f"pip install torch=={TORCH_VERSION} --index-url https://download.pytorch.org/whl/cpu",
    'pip install -e ".[triton]" -c constraints.txt',
)
"""The triton extra from the course's folder (the clone), in its activated environment: PyTorch's CPU build first
(a plain ``torch`` requirement resolves to a multi-GB CUDA build), then the extra. The package is not on PyPI."""
INSTALL_HINT = (
    "in the course's folder, with its environment activated: "
    + " && ".join(INSTALL_COMMANDS)
    + f" (with a GPU, or where download.pytorch.org cannot be reached: pip install torch=={TORCH_VERSION} instead of"
    " the first command)"
)
DEFAULT_BLOCK_M = 64
"""Default ``B_r`` (``BLOCK_M``): the query rows of one program."""
DEFAULT_BLOCK_N = 64
"""Default ``B_c`` (``BLOCK_N``): the keys of one step."""
MAX_HEAD_DIM = 128

_TOO_LATE = False  # True: no GPU, but Triton was imported (compiled mode) before this module could switch it
try:
    import torch

    if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
        # No GPU: run the kernels in Triton's interpreter. Triton reads the variable when a function is decorated
        # with @triton.jit, its own library functions included, so it must be set before triton is first imported.
        if "triton" in sys.modules:
            _TOO_LATE = True
        else:
            os.environ["TRITON_INTERPRET"] = "1"
    import triton
    import triton.language as tl
except ImportError as error:  # the extra is not installed: the module imports, the wrapper explains
    torch = triton = tl = None  # type: ignore[assignment, unused-ignore]  # (unused where torch is not installed)
    _IMPORT_ERROR: ImportError | None = error
else:
    _IMPORT_ERROR = None


def available() -> bool:
    """True when PyTorch and Triton are installed (the ``triton`` extra)."""
    return _IMPORT_ERROR is None


def interpreted() -> bool:
    """True when the kernel runs in Triton's interpreter on the CPU, False when it is compiled for a GPU."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class ExtraNotInstalled(ModuleNotFoundError):
    """PyTorch or Triton is missing. In a notebook it shows as its message alone, without a traceback (IPython
    prints what ``_render_traceback_`` returns), and, being an error, it stops *Run All* at that cell."""

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()


def install_hint() -> str:
    """:data:`INSTALL_HINT` in the selected language (:mod:`flashmath.i18n`)."""
    return _(
        "in the course's folder, with its environment activated: {commands} (with a GPU, or where "
        "download.pytorch.org cannot be reached: pip install torch=={torch} instead of the first command)"
    ).format(commands=" && ".join(INSTALL_COMMANDS), torch=TORCH_VERSION)


def require_triton() -> None:
    if _IMPORT_ERROR is not None:
        raise ExtraNotInstalled(
            _("the Triton kernel needs PyTorch and Triton ({error}); install them {hint}").format(
                error=_IMPORT_ERROR, hint=install_hint()
            )
        ) from _IMPORT_ERROR


#: The chapters that check the extra in their first cell (``require_extra("Chapter 11")``): marked, so that the line
#: saying the extra is installed is translated whole when a language was selected before that cell.
CHAPTER_NAMES = (N_("This chapter"), N_("Chapter 11"), N_("Chapter 12"))


def require_extra(chapter: str = "This chapter") -> None:
    """Stop with the install commands unless PyTorch and Triton are installed (the first code cell of chapter 11).

    Prints one line when they are, in the selected language (:mod:`flashmath.i18n`). Raises:
        ExtraNotInstalled: (a ModuleNotFoundError) naming what is missing and the commands that install it.
    """
    if _IMPORT_ERROR is None:
        print(
            _("{chapter} needs PyTorch and Triton (the triton extra): both are installed.").format(chapter=_(chapter))
        )
        return
    commands = "\n".join(f"    {command}" for command in INSTALL_COMMANDS)
    raise ExtraNotInstalled(
        _(
            "{chapter} needs the triton extra, PyTorch and Triton ({error}).\n"
            "Install it in a terminal, in the course's folder, with its environment activated:\n"
            "{commands}\n"
            "(with a GPU, or without access to download.pytorch.org: pip install torch=={torch} as the first;\n"
            'on macOS and Windows, open this chapter in Colab: README, "The triton extra"),\n'
            "then restart the kernel (Kernel > Restart Kernel...) and run the chapter again.\n"
            "Run All stops here, and has cleared the stored outputs below (made with the extra). To read\n"
            "them: File > Reload Notebook from Disk (if it was saved since: git restore the notebook's file)."
        ).format(chapter=_(chapter), error=_IMPORT_ERROR, commands=commands, torch=TORCH_VERSION)
    ) from None


def too_late() -> bool:
    """True when there is no GPU but Triton was imported (compiled mode) before this module could switch it to its
    interpreter: the kernels cannot run then (restart Python and import the kernels' modules before triton)."""
    return _TOO_LATE


def padded_width(size: int) -> int:
    """The tile width of a head dimension: the next power of two, at least 16."""
    return max(16, 1 << max(0, size - 1).bit_length())


def _numpy_dtype(dtype) -> np.dtype:
    """A numpy stand-in for a torch dtype, for the shared argument checks (bfloat16 checks as float32)."""
    name = str(dtype).removeprefix("torch.")
    if name == "bfloat16":
        return np.dtype(np.float32)
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(object)  # complex, quantised...: refused by the checks with the argument's name


def stand_in(x):
    """A zero-byte numpy array with the shape and dtype of a tensor (or the array itself): the checks of
    :func:`flashmath.attention.prepare_attention_inputs` run on it without copying a GPU tensor to the host."""
    if torch is not None and isinstance(x, torch.Tensor):
        return np.broadcast_to(np.zeros((), _numpy_dtype(x.dtype)), tuple(x.shape))
    return x


FLOAT32_SCALES = (float(np.finfo(np.float32).smallest_normal), float(np.finfo(np.float32).max))
"""The magnitudes of a scale that a float32 score tile can be multiplied by (0 aside)."""


def check_kernel_inputs(q, k, v, *, scale=None, causal=False, mask=None) -> AttentionInputs:
    """The checks every kernel wrapper runs (forward and backward): those of
    :func:`flashmath.inputs.prepare_attention_inputs` on zero-byte stand-ins (a GPU tensor is never copied to the
    host for them), then float64 refused and ``D``, ``Dv`` at most :data:`MAX_HEAD_DIM`.

    Returns:
        the :class:`flashmath.inputs.AttentionInputs` of the stand-ins (shapes, scale, dtype; not the data).

    Raises:
        TypeError, ValueError: as :func:`flashmath.inputs.prepare_attention_inputs`; TypeError for float64 inputs;
        ValueError for a head dimension above :data:`MAX_HEAD_DIM`.
    """
    inp = prepare_attention_inputs(
        stand_in(q),
        stand_in(k),
        stand_in(v),
        scale=scale,
        causal=causal,
        mask=stand_in(mask) if mask is not None else None,
        fold_causal=False,
    )
    if inp.dtype == np.float64:
        raise TypeError(
            "the Triton kernels take float16, bfloat16 or float32 inputs (GPU matrix units have no fast "
            f"float64), got {inp.dtype}; cast them first, e.g. q.astype(np.float32)"
        )
    for size, name in ((inp.D, "D"), (inp.Dv, "Dv")):
        if size > MAX_HEAD_DIM:
            raise ValueError(f"the Triton kernels handle head dimensions up to {MAX_HEAD_DIM}, got {name} = {size}")
    return inp


def kernel_device(q, k, v, tensors):
    """The device both kernels' wrappers run on: the device of the first tensor among ``q``, ``k``, ``v``
    (``tensors``: which of them are tensors) unless it is the CPU; else the CPU under Triton's interpreter, else
    the GPU.

    Raises:
        RuntimeError: no GPU and Triton imported before this module (:func:`too_late`), or no GPU and the
        interpreter switched off.
    """
    if too_late():
        raise RuntimeError(
            "there is no CUDA GPU, and Triton was imported before flashmath.triton_kernel, so it could "
            "not be switched to its interpreter: import flashmath.triton_kernel before triton (restart "
            "the kernel), or set the environment variable TRITON_INTERPRET=1 before Python starts"
        )
    device = next((x.device for x, is_t in zip((q, k, v), tensors, strict=True) if is_t), None)
    if device is None or device.type == "cpu":
        if interpreted():
            return torch.device("cpu")
        if torch.cuda.is_available():
            return torch.device("cuda")
        raise RuntimeError(
            "no CUDA device, and Triton's interpreter is off: set the environment variable "
            "TRITON_INTERPRET=1 before Python starts (or unset it) to run the kernels on the CPU"
        )
    return device


@contextlib.contextmanager
def quiet_interpreter():
    """In the interpreter, numpy's warnings about NaN and inf in the inputs (``inf - inf`` in a product, an all-NaN
    row) are silenced: they are how the interpreter computes, not messages for the user (NaN in still gives NaN
    out). A compiled kernel has no such warnings."""
    if not interpreted():
        yield
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def as_tensor(x, device):
    """``x`` (an array or a tensor) as a tensor on ``device``, without copying when it is already there."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    x = np.ascontiguousarray(x)
    if not x.flags.writeable:  # torch wants writable memory (read-only arrays, e.g. the shipped heads): a copy
        x = x.copy()
    return torch.from_numpy(x).to(device)


def rule_blocks(source: str, rules: tuple[str, ...]) -> dict:
    """``{rule: [code lines]}``: for each comment line that starts with one of ``rules``, the code lines right
    under it (up to the next blank line, comment line or dedent; deeper lines, continuations and bodies, are kept
    with their extra indentation), comments removed; the first such comment of a rule counts. Chapters 11 and 12
    print a loop of the package beside a kernel with it (``line_for_line``, ``backward_line_for_line``)."""
    blocks: dict[str, list[str]] = {}
    lines = source.splitlines()
    for i, line in enumerate(lines):
        comment = line.strip()
        if not comment.startswith("# "):
            continue
        head = next((rule for rule in rules if comment[2:].startswith(rule)), None)
        if head is None:
            continue
        indent = len(line) - len(line.lstrip())
        code = []
        for following in lines[i + 1 :]:
            stripped = following.strip()
            deeper = len(following) - len(following.lstrip()) - indent  # > 0: a continuation or a block's body
            if not stripped or deeper < 0 or (deeper == 0 and stripped.startswith("#")):
                break
            if not stripped.startswith("#"):
                code.append(" " * deeper + re.sub(r"\s+#.*$", "", stripped))
        blocks.setdefault(head, code)
    return blocks
