"""flashmath._notebook_format: the stored form of a notebook, and the two tools that write it (nbconvert, the
Jupyter server's save) as the course's jupyter-config sets them up."""

import json

import pytest

from flashmath._notebook_format import normalize, pre_save_hook, preprocess


def notebook(**metadata):
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": metadata,
            "cells": [{"cell_type": "code", "id": "a1", "execution_count": 1, "source": "x = 1", "outputs": [],
                       "metadata": {"tags": ["keep"], "execution": {"iopub.status.idle": "2026-12-01T00:00:00Z"}}}]}


def test_machine_specific_metadata_is_removed_and_the_rest_kept():
    nb = notebook(language_info={"name": "python", "version": "3.11.7", "pygments_lexer": "ipython3"},
                  kernelspec={"name": "python3"})
    assert normalize(nb) is nb
    assert nb["metadata"] == {"language_info": {"name": "python", "pygments_lexer": "ipython3"},
                              "kernelspec": {"name": "python3"}}
    assert nb["cells"][0]["metadata"] == {"tags": ["keep"]}


def test_whole_floats_become_ints_as_a_browser_writes_them():
    state = {"value": 10.0, "min": -0.0, "step": 0.5, "big": 1e300, "n": 3, "flag": True, "nested": [[2.0, 2.5]]}
    nb = normalize(notebook(widgets={"state": state}))
    out = nb["metadata"]["widgets"]["state"]
    # JSON.stringify(JSON.parse(...)) in the browser: 10.0 -> 10, 0.5 stays, 1e300 stays a float, bools stay bools
    assert json.dumps(out, sort_keys=True) == json.dumps(
        {"value": 10, "min": 0, "step": 0.5, "big": 1e300, "n": 3, "flag": True, "nested": [[2, 2.5]]}, sort_keys=True)
    assert out["flag"] is True and isinstance(out["value"], int)


def test_normalize_is_idempotent_and_refuses_what_is_not_a_notebook():
    nb = normalize(notebook(language_info={"name": "python", "version": "3.12.1"}))
    assert normalize(json.loads(json.dumps(nb))) == nb
    with pytest.raises(TypeError, match="nbformat 4 notebook"):
        normalize({"cells": "x"})


def test_the_hook_and_the_preprocessor_apply_it():
    model = {"type": "notebook", "content": notebook(language_info={"name": "python", "version": "3.10.13"})}
    pre_save_hook(model=model, path="x.ipynb", contents_manager=None)
    assert "version" not in model["content"]["metadata"]["language_info"]
    other = {"type": "file", "content": "text"}
    pre_save_hook(model=other, path="x.txt", contents_manager=None)
    assert other == {"type": "file", "content": "text"}
    nb, resources = preprocess(notebook(language_info={"version": "3.13.0"}), {"r": 1})
    assert nb["metadata"]["language_info"] == {} and resources == {"r": 1}
