"""The set-up README.md describes: Binder's environment.yml on the pins of constraints.txt, the Python versions,
the Jupyter settings of jupyter-config/, the README screenshot; every Colab and Binder URL matches pyproject.toml.

The commands themselves (set-up, tests, sizes, every Python) are run by .ci/run.
"""

import json
import os
import queue
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from importlib import metadata
from pathlib import Path

import pins  # scripts/pins.py (tests/conftest.py puts scripts/ on sys.path)
import pytest
from helpers import ROOT, free_port
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
README = (ROOT / "README.md").read_text()
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
REPO_URL = PYPROJECT["project"]["urls"]["Repository"]
GITHUB_PATH = REPO_URL.removeprefix("https://github.com/")
JUPYTER_CONFIG = ROOT / "jupyter-config" / "etc"


def binder_environment() -> dict:
    """Marker environment of Binder's Python: conda-forge's newest release of environment.yml's python=3.X."""
    minor = pins.binder_python()
    return {
        **default_environment(),
        "python_version": minor,
        "python_full_version": f"{minor}.99",
        "implementation_version": f"{minor}.99",
        "sys_platform": "linux",
        "platform_system": "Linux",
    }


def readme_command(start: str, readme: str = README) -> str:
    """The one line of a ```bash block in README.md (or ``readme``) that starts with ``start`` (as .ci/run reads
    README.md's)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    found = [line for block in blocks for line in block.splitlines() if line.startswith(start)]
    assert len(found) == 1, f"the README needs exactly one command line starting with {start!r}: {found}"
    return found[0]


# -- Binder ----------------------------------------------------------------------------------------------------


def test_binder_pins_equal_constraints():
    binder = pins.environment_pins()
    expected = pins.pins_for(binder_environment())
    assert binder, "environment.yml's pip section pins nothing"
    assert {n: v for n, v in binder.items() if expected.get(n) != v} == {}, (
        "environment.yml and constraints.txt disagree: run `python scripts/pins.py`\n"
        + "\n".join(
            f"  {n}: environment.yml {v}, constraints.txt {expected.get(n)}"
            for n, v in binder.items()
            if expected.get(n) != v
        )
    )
    project = PYPROJECT["project"]
    direct = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["lab"]]
    assert {canonicalize_name(r.name) for r in direct} <= set(binder)


def test_binder_pins_everything_the_course_installs():
    """environment.yml pins the whole of `pip install .[lab]` on Binder's Python, not just some of it.

    Followed through the metadata of this environment's packages, so it runs where they are Binder's versions.
    """
    expected = pins.pins_for(binder_environment())
    installed = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
    requires = {name: (d.requires or []) for name, d in installed.items()}
    try:
        needed = pins.closure([Requirement("flashmath[lab]")], requires, binder_environment()) - {"flashmath"}
    except KeyError as missing:
        pytest.skip(f"{missing} is not installed here, so Binder's install cannot be followed")
    other = sorted(f"{n} {installed[n].version}" for n in needed if installed[n].version != expected.get(n))
    if other:
        pytest.skip(
            f"this environment has other versions than Binder's: {', '.join(other[:4])}"
            + (f" and {len(other) - 4} more" if len(other) > 4 else "")
        )
    assert sorted(needed - set(pins.environment_pins())) == [], "run `python scripts/pins.py`"
    assert sorted(set(pins.environment_pins()) - needed) == [], "environment.yml pins what Binder does not need"


def test_environment_yml_installs_python_pip_and_the_course():
    text = (ROOT / "environment.yml").read_text()
    assert "conda-forge" in text
    conda = re.findall(r"^  - (\S.*)$", text[text.index("dependencies:") :], re.MULTILINE)
    assert conda == [f"python={pins.binder_python()}", "pip", "pip:"], "everything but Python comes from pip, pinned"
    assert re.search(r"^\s+- -e \.\[lab\]\s*$", text, re.MULTILINE)
    assert pins.binder_python() in python_versions_in_readme()


def test_binder_gets_the_jupyter_settings():
    post_build = (ROOT / "postBuild").read_text()
    assert "cp -R jupyter-config/etc " in post_build


# -- Python versions and commands -------------------------------------------------------------------------------


def python_versions_in_readme() -> list[str]:
    match = re.search(r"You need git and Python ((?:3\.\d+, )*3\.\d+ or 3\.\d+)", README)
    assert match, "README.md's Start section names the Python versions"
    return re.findall(r"3\.\d+", match.group(1))


def test_python_versions_agree():
    readme = python_versions_in_readme()
    classifiers = [
        c.rsplit(" :: ", 1)[1]
        for c in PYPROJECT["project"]["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    ci = re.search(r'^SUPPORTED="([^"]+)"', (ROOT / ".ci" / "run").read_text(), re.MULTILINE).group(1).split()
    assert readme == classifiers == ci
    assert PYPROJECT["project"]["requires-python"] == f">={readme[0]}", "pip must refuse older Pythons by name"


def clone_folder() -> str:
    """The folder README's `git clone` line clones into (and enters)."""
    command = readme_command("git clone ")
    match = re.fullmatch(rf"git clone {re.escape(REPO_URL)}\.git (\S+) && cd (\S+)", command)
    assert match and match.group(1) == match.group(2), f"clone into a named folder and cd into it: {command!r}"
    return match.group(1)


def test_readme_commands():
    # not the package's name: Python started above a clone named `flashmath` imports the clone (see below)
    assert clone_folder() not in ("flashmath", GITHUB_PATH.split("/")[1])
    setup = readme_command("python3 -m venv ")
    assert '-e ".[lab]" -c constraints.txt' in setup, "the learner installs the course and JupyterLab, no test tools"
    assert "cp -R jupyter-config/etc .venv/" in setup
    tests = readme_command('pip install -e ".[lab,test]"')
    assert tests == 'pip install -e ".[lab,test]" -c constraints.txt && python -m pytest'
    assert readme_command("jupyter lab ").endswith("notebooks/00_welcome.ipynb")
    assert " && jupyter trust " in setup, "stored animations run before anything is run"
    assert f"cd {clone_folder()} && . .venv/bin/activate && jupyter lab notebooks/" in README, "README's next time"
    assert "jupyterlab" not in " ".join(PYPROJECT["project"]["optional-dependencies"]["test"])


def trusted_notebooks(command: str) -> set[str]:
    """The files that a command ending in ``jupyter trust <patterns>`` trusts, its patterns expanded in the clone."""
    match = re.search(r"(?:^|&& )jupyter trust ([^&]+)$", command)
    assert match, f"the command ends with `jupyter trust`: {command!r}"
    return {p.relative_to(ROOT).as_posix() for pattern in match.group(1).split() for p in ROOT.glob(pattern)}


@pytest.mark.parametrize("where", ["README.md", "README.zh-CN.md", "postBuild"])
def test_the_set_up_trusts_both_editions(where):
    # set up from either README (or on Binder), a learner may open either edition: its stored animations must run
    editions = [*NOTEBOOKS, *sorted((ROOT / "notebooks" / "zh").glob("[0-9][0-9]_*.ipynb"))]
    text = (ROOT / where).read_text()
    if where == "postBuild":
        command = text.strip().splitlines()[-1]
    else:
        command = readme_command("python3 -m venv ", text)
        # .ci/run runs README.md's set-up line only: the Chinese README's is the same line
        assert command == readme_command("python3 -m venv ")
    assert trusted_notebooks(command) == {p.relative_to(ROOT).as_posix() for p in editions}
    if where == "README.md":  # after an update: the set-up's last two commands again
        trust = command[command.index("jupyter trust ") :]
        assert f'`pip install -e ".[lab]" -c constraints.txt && {trust}`' in text


def test_python_started_above_the_clone_imports_the_course(tmp_path):
    """The folder above the clone, where `python` may be started: the clone is a folder there, named as README
    names it. A clone named after the package, `flashmath/`, has no __init__.py at its top, so Python imported it
    as an empty namespace package ahead of the editable install (whose import hook comes after the path search):
    `AttributeError: module 'flashmath' has no attribute 'online_normalizer'`."""
    (tmp_path / clone_folder()).symlink_to(ROOT, target_is_directory=True)
    code = "import flashmath; print(flashmath.__file__); print(flashmath.online_normalizer([1.0, 2.0]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.splitlines()[0]).resolve() == (ROOT / "flashmath" / "__init__.py").resolve()


def test_ci_copies_the_course_into_a_folder_named_as_readme_clones_it():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "FOLDER=${CLONE##* cd }" in ci and "dir=$WORK/$version/$FOLDER" in ci


def test_colab_keeps_its_ipywidgets_7_7():
    spec = next(d for d in PYPROJECT["project"]["dependencies"] if d.startswith("ipywidgets"))
    assert ">=7.7" in spec.replace(" ", "")
    assert "jupyterlab" not in " ".join(PYPROJECT["project"]["dependencies"]), "JupyterLab belongs in the lab extra"


# -- Jupyter settings (jupyter-config/) -------------------------------------------------------------------------


def skip_unless_settings_installed() -> None:
    for path in JUPYTER_CONFIG.rglob("*.*"):
        installed = Path(sys.prefix) / path.relative_to(JUPYTER_CONFIG.parent)
        if not installed.is_file() or installed.read_text() != path.read_text():
            pytest.skip(
                f"{installed} is not jupyter-config's: run README's set-up (its `cp -R jupyter-config/etc .venv/`)"
            )


def throwaway_user_folders(tmp: Path) -> dict:
    """The environment with Jupyter's user folders in ``tmp``: only the settings installed in sys.prefix count."""
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH")}
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_DATA_DIR=str(tmp / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
        IPYTHONDIR=str(tmp / "ipython"),
    )
    return env


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """README's `jupyter lab` command with this environment's settings (only user folders are throw-away)."""
    skip_unless_settings_installed()
    tmp = tmp_path_factory.mktemp("jupyterlab")
    env = throwaway_user_folders(tmp)
    course = tmp / "course"  # a copy of the notebooks, so that a save never writes into the repository
    shutil.copytree(ROOT / "notebooks", course / "notebooks")
    token, port = secrets.token_hex(16), free_port()
    command = readme_command("jupyter lab ").split()
    cmd = [
        sys.executable,
        "-m",
        *command,
        "--no-browser",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
    ] + (["--allow-root"] if os.geteuid() == 0 else [])
    log = tmp / "jupyterlab.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=course, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )

    def api(path, method="GET", body=None):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response) if response.status != 204 else None

    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, f"jupyter lab exited:\n{log.read_text()[-3000:]}"
            try:
                api("/api/status")
                break
            except OSError:
                assert time.monotonic() < deadline, f"jupyter lab did not answer in 90 s:\n{log.read_text()[-3000:]}"
                time.sleep(0.3)
        yield api, log, tmp / "runtime", course
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def shell_reply(client, msg_id: str, deadline: float) -> dict:
    """The shell channel's reply to ``msg_id`` (no heartbeat check: on a loaded machine it lags, not the kernel)."""
    while time.monotonic() < deadline:
        try:
            msg = client.get_shell_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg
    raise AssertionError("the kernel did not reply within 120 s")


def test_kernels_start_encrypted_without_the_tcp_warning(jupyterlab):
    from jupyter_client import BlockingKernelClient

    api, log, runtime, _ = jupyterlab
    kernel = api("/api/kernels", "POST", {"name": "python3"})
    connection = runtime / f"kernel-{kernel['id']}.json"
    assert json.loads(connection.read_text()).get("curve_publickey"), "the kernel got no CurveZMQ key"
    client = BlockingKernelClient()
    client.load_connection_file(str(connection))
    client.start_channels(hb=False)
    deadline = time.monotonic() + 120
    try:
        # Replies come only through the encrypted sockets, after the kernel's start-up warnings are in the log.
        assert shell_reply(client, client.kernel_info(), deadline)["content"]["status"] == "ok"
        assert shell_reply(client, client.execute("6 * 7"), deadline)["content"]["status"] == "ok"
    finally:
        client.stop_channels()
        api(f"/api/kernels/{kernel['id']}", "DELETE")
    assert "without encryption" not in log.read_text()


def browser_json(value):
    """``value`` through a browser's JSON (one kind of number: a whole float comes back as an integer)."""

    def number(text):
        x = float(text)
        return int(x) if x.is_integer() and abs(x) <= 2**53 else x

    return json.loads(json.dumps(value), parse_float=number)


def test_jupyterlab_starts_without_a_warning(jupyterlab):
    # the course's save hook once set the ContentsManager.pre_save_hook trait, which jupyter_server validates again
    # at every config reload (and jupytext's second contents manager): "UserWarning: Overriding existing
    # pre_save_hook" at every start. The server answered, so its start-up is in the log.
    _, log, _, _ = jupyterlab
    text = log.read_text()
    assert "Overriding existing pre_save_hook" not in text and "Warning:" not in text, text[-3000:]
    assert "flashmath: notebooks are saved as JupyterLab writes them" not in text  # the hook was installed


def test_saving_a_chapter_in_jupyterlab_leaves_the_stored_file_as_it_was(jupyterlab):
    # What JupyterLab 4.6 sends when it autosaves a chapter that was only opened (seen in headless Chromium,
    # flashmath/_notebook_format.py): the kernel's Python version, and the numbers as the browser writes them.
    api, _, _, course = jupyterlab
    name = "01_softmax.ipynb"  # `jupyter lab notebooks/00_welcome.ipynb` serves notebooks/
    stored = (course / "notebooks" / name).read_bytes()
    nb = api(f"/api/contents/{name}?content=1&type=notebook")["content"]
    nb["metadata"].setdefault("language_info", {})["version"] = "3.99.0"
    api(f"/api/contents/{name}", "PUT", {"type": "notebook", "format": "json", "content": browser_json(nb)})
    saved = (course / "notebooks" / name).read_bytes()
    assert saved == stored, "the course's pre_save_hook (jupyter-config/etc/jupyter/jupyter_server_config.py)"


def test_nbconvert_kernels_start_encrypted_without_the_tcp_warning(tmp_path):
    # README's command to store a notebook's outputs; its kernel is started by nbclient, not by JupyterLab's server
    import nbformat

    skip_unless_settings_installed()
    notebook = tmp_path / "answer.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, notebook)
    out = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--stdout", str(notebook)],
        cwd=tmp_path,
        env=throwaway_user_folders(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "42" in "".join(nbformat.reads(out.stdout, 4).cells[0].outputs[0].text)
    assert "without encryption" not in out.stderr, out.stderr[-3000:]


def test_no_news_prompt_and_no_update_check(jupyterlab):
    api, _, _, _ = jupyterlab
    settings = api("/lab/api/settings/@jupyterlab/apputils-extension:notification")
    defaults = {k: v.get("default") for k, v in settings["schema"]["properties"].items()}
    # The prompt "Would you like to get notified about official Jupyter news?" shows while fetchNews is "none".
    assert defaults["fetchNews"] == "false" and defaults["checkForUpdates"] is False


# -- README screenshot and URLs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("readme", "picture", "retake"),
    [
        ("README.md", "screenshot.png", "python scripts/screenshot.py"),
        (
            "README.zh-CN.md",
            "screenshot-zh.png",
            "python scripts/screenshot.py --notebook notebooks/zh/02_online_softmax.ipynb --out docs/screenshot-zh.png",
        ),
    ],
)
def test_screenshot_shows_a_cell_the_notebook_still_has(readme, picture, retake):
    from PIL import Image

    assert f"(docs/{picture})" in (ROOT / readme).read_text(encoding="utf-8")
    with Image.open(ROOT / "docs" / picture) as image:
        text = dict(image.text)
    assert "flashmath:notebook" in text, f"retake it with `{retake}` (it records the cell)"
    nb = json.loads((ROOT / text["flashmath:notebook"]).read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert text["flashmath:cell"] in sources, (
        f"{text['flashmath:notebook']} no longer has the cell in docs/{picture}: `{retake}`"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_urls_match_pyproject(path):
    nb = json.loads(path.read_text())
    badge = "".join(nb["cells"][0]["source"])
    assert f"https://colab.research.google.com/github/{GITHUB_PATH}/blob/main/notebooks/{path.name}" in badge
    assert f"https://mybinder.org/v2/gh/{GITHUB_PATH}/main?urlpath=lab/tree/notebooks/{path.name}" in badge
    install = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    assert '"google.colab" in sys.modules' in install, "the first code cell must install only on Colab"
    urls = re.findall(r"git\+(https://\S+?)[\"']", install)
    assert urls == [REPO_URL]


def test_readme_urls_match_pyproject():
    colab = re.findall(r"https://colab\.research\.google\.com/github/([^/]+/[^/]+)/", README)
    binder = re.findall(r"https://mybinder\.org/v2/gh/([^/]+/[^/]+)/", README)
    assert colab and binder
    assert set(colab) == set(binder) == {GITHUB_PATH}
    for path in NOTEBOOKS:  # every chapter has its row and badge
        assert f"notebooks/{path.name}" in README
