"""The stored form of the course's notebooks: nothing in them depends on the machine that ran or saved them.

Opening a chapter in JupyterLab must not change the file in the clone (``git pull`` would then conflict). Found by
opening chapters in JupyterLab 4.6 in headless Chromium and saving them, JupyterLab rewrites two things when it
saves a notebook, even one the reader never edited (tests/test_environments.py saves a chapter through the
Jupyter server as JupyterLab sends it, and checks that the file comes back byte for byte):

- ``metadata.language_info.version``: the Python version of the kernel that ran it (3.11.7 on one machine,
  3.11.2 on the next). Opening a chapter starts a kernel, whose version JupyterLab writes into the notebook and
  autosaves two minutes later.
- whole numbers stored as floats: the browser's JSON has one kind of number, so the ``10.0`` that Python wrote
  (a slider's value in the widget state, ``metadata.widgets``) comes back as ``10``.

:func:`normalize` removes the version and writes whole floats as integers (what JupyterLab writes anyway), and
drops the per-cell execution timestamps that ``jupyter nbconvert --execute`` records
(``metadata.execution``), which change at every run. Three places apply it, so a stored notebook and a saved one
agree byte for byte:

- ``jupyter nbconvert --to notebook --execute --inplace``: :func:`preprocess`, registered by
  ``jupyter-config/etc/jupyter/jupyter_nbconvert_config.py``;
- saving in JupyterLab: :func:`pre_save_hook`, registered by ``jupyter-config/etc/jupyter/jupyter_server_config.py``
  (the README's set-up copies both into the virtual environment);
- by hand: ``python -m flashmath._notebook_format notebooks/*.ipynb`` rewrites the files in place.

Re-executing a chapter must change only what its code changed (a reviewer reads the diff), so :func:`normalize`
also removes what differs from run to run though the code did not change:

- the widget state (``metadata.widgets``) and each output's widget view
  (``application/vnd.jupyter.widget-view+json``, whose ``model_id`` is a new random id at every run): every slider
  is followed by a static picture of its figure (the hygiene test checks it), which is what GitHub and nbviewer
  show; in JupyterLab a widget shows its text form (``interactive(...)``) until its cell runs;
- the random id that matplotlib's animation player gives each animation (``anim<uuid>``, ``_anim_img<uuid>``...):
  replaced by a hash of the animation's own HTML, so the same frames give the same id, and two different
  animations open in one JupyterLab page still have different ones;
- a stream cut into several outputs by the kernel's timing: consecutive outputs of one stream become one (nbval
  joins them the same way before it compares).

tests/test_notebooks.py checks that every stored notebook is in this form, and tests/test_notebook_format.py that
executing a chapter twice gives the same file. Only the standard library is used here:
the Jupyter server imports this module when it starts.
"""

from __future__ import annotations

import hashlib
import re
import sys

__all__ = ["normalize", "pre_save_hook", "preprocess", "MACHINE_KEYS"]

MACHINE_KEYS = {
    "language_info": ("version",),  # notebook metadata: the kernel's Python version
    "cell": ("execution",),  # cell metadata: nbconvert's timestamps of the last run
}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
ANIMATION_ID = re.compile(r"\banim([0-9a-f]{32})\b")  # matplotlib's to_jshtml: anim<uuid4 hex>, in every id it makes
LARGEST_EXACT = 2**53  # JavaScript writes whole numbers up to 1e21 without an exponent; doubles are exact to 2**53


def _whole_floats_as_ints(value):
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) <= LARGEST_EXACT else value
    if isinstance(value, dict):
        for key, item in value.items():
            value[key] = _whole_floats_as_ints(item)
    elif isinstance(value, list):
        for k, item in enumerate(value):
            value[k] = _whole_floats_as_ints(item)
    return value


def normalize(nb: dict) -> dict:
    """Put a notebook (a dict or ``nbformat.NotebookNode``, nbformat 4) in the stored form, in place; returns it.

    Raises:
        TypeError: ``nb`` is not a notebook dict (no ``cells`` list or no ``metadata`` dict).
    """
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or not isinstance(nb.get("metadata"), dict):
        raise TypeError(
            f"nb must be an nbformat 4 notebook dict (with 'cells' and 'metadata'), got {type(nb).__name__}"
        )
    language_info = nb["metadata"].get("language_info")
    if isinstance(language_info, dict):
        for key in MACHINE_KEYS["language_info"]:
            language_info.pop(key, None)
    nb["metadata"].pop("widgets", None)
    for cell in nb["cells"]:
        metadata = cell.get("metadata")
        if isinstance(metadata, dict):
            for key in MACHINE_KEYS["cell"]:
                metadata.pop(key, None)
        if isinstance(cell.get("outputs"), list):
            cell["outputs"] = _stable_outputs(cell["outputs"])
    return _whole_floats_as_ints(nb)


def _stable_outputs(outputs: list) -> list:
    """A cell's outputs without widget views, with animation ids from their content, and each stream in one piece."""
    kept: list = []
    for output in outputs:
        data = output.get("data") if isinstance(output, dict) else None
        if isinstance(data, dict):
            data.pop(WIDGET_VIEW, None)
            if "text/html" in data:
                data["text/html"] = _stable_animation_ids(data["text/html"])
        previous = kept[-1] if kept else None
        if (
            isinstance(output, dict)
            and output.get("output_type") == "stream"
            and isinstance(previous, dict)
            and previous.get("output_type") == "stream"
            and previous.get("name") == output.get("name")
        ):
            previous["text"] = _text(previous["text"]) + _text(output.get("text", ""))
            continue
        kept.append(output)
    return kept


def _text(value) -> str:
    """A multiline string of a notebook, stored as one string or as a list of lines."""
    return "".join(value) if isinstance(value, list) else value


def _stable_animation_ids(html):
    """``html`` (a string or a list of lines) with each animation's random id replaced by a hash of its content."""
    text = _text(html)
    ids = sorted(set(ANIMATION_ID.findall(text)))
    if not ids:
        return html
    blank = text
    for old in ids:
        blank = blank.replace(old, "")
    for n, old in enumerate(ids):
        text = text.replace(old, hashlib.sha256(f"{n}:{blank}".encode()).hexdigest()[:32])
    return text.splitlines(keepends=True) if isinstance(html, list) else text


def pre_save_hook(model: dict, **kwargs) -> None:
    """Jupyter server's ``ContentsManager.pre_save_hook``: a notebook is saved in the stored form."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        normalize(model["content"])


def preprocess(nb, resources):
    """An nbconvert preprocessor (a plain callable): the exported notebook is in the stored form."""
    return normalize(nb), resources


def _main(paths: list[str]) -> int:
    """Rewrite each notebook file in the stored form (as nbformat writes it); print the ones that changed."""
    import nbformat

    if not paths:
        print("usage: python -m flashmath._notebook_format NOTEBOOK.ipynb...", file=sys.stderr)
        return 2
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
        new = nbformat.writes(normalize(nb)) + "\n"
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"normalized {path}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
