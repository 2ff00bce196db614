"""flashmath._notebook_format: the stored form of a notebook, and the two tools that write it (nbconvert, the
Jupyter server's save) as the course's jupyter-config sets them up."""

import json

import pytest
from helpers import ROOT

from flashmath._notebook_format import normalize, pre_save_hook, preprocess


def notebook(**metadata):
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": metadata,
        "cells": [
            {
                "cell_type": "code",
                "id": "a1",
                "execution_count": 1,
                "source": "x = 1",
                "outputs": [],
                "metadata": {"tags": ["keep"], "execution": {"iopub.status.idle": "2026-12-01T00:00:00Z"}},
            }
        ],
    }


def test_machine_specific_metadata_is_removed_and_the_rest_kept():
    nb = notebook(
        language_info={"name": "python", "version": "3.11.7", "pygments_lexer": "ipython3"},
        kernelspec={"name": "python3"},
    )
    assert normalize(nb) is nb
    assert nb["metadata"] == {
        "language_info": {"name": "python", "pygments_lexer": "ipython3"},
        "kernelspec": {"name": "python3"},
    }
    assert nb["cells"][0]["metadata"] == {"tags": ["keep"]}


def test_whole_floats_become_ints_as_a_browser_writes_them():
    state = {"value": 10.0, "min": -0.0, "step": 0.5, "big": 1e300, "n": 3, "flag": True, "nested": [[2.0, 2.5]]}
    nb = normalize(notebook(custom={"state": state}))
    out = nb["metadata"]["custom"]["state"]
    # JSON.stringify(JSON.parse(...)) in the browser: 10.0 -> 10, 0.5 stays, 1e300 stays a float, bools stay bools
    assert json.dumps(out, sort_keys=True) == json.dumps(
        {"value": 10, "min": 0, "step": 0.5, "big": 1e300, "n": 3, "flag": True, "nested": [[2, 2.5]]}, sort_keys=True
    )
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


def widget_output(model_id):
    return {
        "output_type": "execute_result",
        "execution_count": 1,
        "metadata": {},
        "data": {
            "text/plain": "interactive(children=(IntSlider(value=0),))",
            "application/vnd.jupyter.widget-view+json": {"model_id": model_id, "version_major": 2},
        },
    }


def test_widget_state_and_views_are_not_stored_their_text_is():
    nb = notebook(widgets={"application/vnd.jupyter.widget-state+json": {"state": {"a" * 32: {}}}})
    nb["cells"][0]["outputs"] = [widget_output("a" * 32)]
    normalize(nb)
    assert "widgets" not in nb["metadata"]
    assert nb["cells"][0]["outputs"][0]["data"] == {"text/plain": "interactive(children=(IntSlider(value=0),))"}


def animation(uuid, frame="AAAA"):
    return (
        f'<img id="_anim_img{uuid}">\n<button onclick="anim{uuid}.play_animation()"></button>\n'
        f'<script>frames[0] = "data:image/png;base64,{frame}"; var anim{uuid} = new Animation(frames, '
        f'"_anim_img{uuid}");</script>\n'
    )


def html_output(html):
    return {"output_type": "display_data", "metadata": {}, "data": {"text/html": html, "text/plain": "<HTML>"}}


def stored_html(html):
    nb = notebook()
    nb["cells"][0]["outputs"] = [html_output(html)]
    return normalize(nb)["cells"][0]["outputs"][0]["data"]["text/html"]


def test_an_animation_id_comes_from_its_content():
    first, again = stored_html(animation("1" * 32)), stored_html(animation("2" * 32))
    assert first == again and "1" * 32 not in first  # two runs of the same frames: the same bytes
    assert stored_html(first) == first  # idempotent
    assert stored_html(animation("1" * 32, frame="BBBB")) != first  # other frames: another id
    lines = animation("3" * 32).splitlines(keepends=True)  # nbformat's list of lines stays a list
    assert "".join(stored_html(lines)) == first and isinstance(stored_html(lines), list)
    assert stored_html("<b>anim</b>") == "<b>anim</b>"


def test_a_stream_cut_in_pieces_is_stored_whole():
    nb = notebook()
    nb["cells"][0]["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": "a\n"},
        {"output_type": "stream", "name": "stdout", "text": ["b\n", "c\n"]},
        {"output_type": "stream", "name": "stderr", "text": "warn\n"},
        {"output_type": "stream", "name": "stdout", "text": "d\n"},
    ]
    outputs = normalize(nb)["cells"][0]["outputs"]
    assert [(o["name"], o["text"]) for o in outputs] == [
        ("stdout", "a\nb\nc\n"),
        ("stderr", "warn\n"),
        ("stdout", "d\n"),
    ]


def test_executing_a_chapter_twice_gives_the_same_file(tmp_path):
    # chapter 2: widgets, a stored animation, printed tables and figures; the same code must give the same bytes
    import nbformat
    from nbclient import NotebookClient

    texts = []
    for _ in range(2):
        nb = nbformat.read(ROOT / "notebooks" / "02_online_softmax.ipynb", as_version=4)
        client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
        texts.append(nbformat.writes(normalize(nb)))
    assert texts[0] == texts[1], "something in chapter 2's outputs changes from run to run"
