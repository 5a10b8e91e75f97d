"""
The package's shape: what importing it loads, who may import whom, and no import cycle.

The import graph is read from the code (every ``import`` statement of every module, including
those inside functions and under ``TYPE_CHECKING``), so a lazy import cannot hide an edge.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import anchortrack


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "anchortrack"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> Iterator[str]:
    """The modules (of any package) that module *name* imports, absolute."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                # `from pkg import mod` imports the submodule; `from pkg import name` the package.
                submodule = f"{source}.{alias.name}"
                yield submodule if submodule in MODULES else source


def _graph() -> dict[str, set[str]]:
    """anchortrack's own import graph: module → the anchortrack modules it imports."""
    return {
        name: {target for target in _imports(name, path) if target in MODULES and target != name}
        for name, path in MODULES.items()
    }


def run(code: str) -> subprocess.CompletedProcess[str]:
    """Run *code* in a fresh interpreter with the repository importable."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )


def test_the_graph_reader_sees_lazy_and_relative_imports() -> None:
    """The reader finds what the checks below rely on: relative, absolute and in-function imports."""
    graph = _graph()

    assert {"anchortrack._cli.demo", "anchortrack._cli.explain", "anchortrack._cli.serve"} <= graph[
        "anchortrack._cli"
    ]
    assert "anchortrack.server._app" in graph["anchortrack._cli.serve"]  # imported inside the handler
    assert "anchortrack.stores.redis" in graph["anchortrack.stores._open"]  # imported inside a function
    assert "anchortrack.server._records" in graph["anchortrack.server._state"]


def test_importing_anchortrack_loads_no_command_server_or_optional_dependency() -> None:
    """``import anchortrack`` loads neither the commands, the server, the web stack, redis nor Prometheus."""
    unwanted = (
        "anchortrack._cli",
        "anchortrack.server",
        "starlette",
        "uvicorn",
        "redis",
        "prometheus_client",
    )
    done = run(
        "import sys, anchortrack, anchortrack.stores\n"
        f"unwanted = {unwanted!r}\n"
        "print(sorted(m for m in sys.modules if any(m == u or m.startswith(u + '.') for u in unwanted)))\n"
    )

    assert 0 == done.returncode, done.stderr
    assert "[]" == done.stdout.strip()


def test_nothing_in_the_library_imports_the_commands() -> None:
    """Only ``anchortrack._cli`` itself and ``__main__`` import ``anchortrack._cli``."""
    importers = {
        name
        for name, targets in _graph().items()
        if any(t == "anchortrack._cli" or t.startswith("anchortrack._cli.") for t in targets)
        and not name.startswith("anchortrack._cli")
    }

    assert {"anchortrack.__main__"} == importers


def test_the_server_imports_nothing_of_the_library() -> None:
    """Every anchortrack module the server imports is part of the server."""
    leaks = {
        (name, target)
        for name, targets in _graph().items()
        if name.startswith("anchortrack.server")
        for target in targets
        if not target.startswith("anchortrack.server")
    }

    assert set() == leaks


def test_the_library_reaches_the_server_only_through_the_commands() -> None:
    """Outside ``anchortrack._cli``, no library module imports ``anchortrack.server``."""
    importers = {
        name
        for name, targets in _graph().items()
        if not name.startswith(("anchortrack.server", "anchortrack._cli"))
        and any(t.startswith("anchortrack.server") for t in targets)
    }

    assert set() == importers


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), plus self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    """The finder reports a planted cycle, so an empty answer below means something."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

    assert [["a", "b", "c"]] == _cycles(graph)


def test_no_import_cycle_in_the_package() -> None:
    """No module of anchortrack imports itself back, directly or through others."""
    assert [] == _cycles(_graph())


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["explain", "--help"], ["serve", "--help"]])
def test_help_loads_no_web_stack(argv: list[str]) -> None:
    """``anchortrack … --help`` works without importing starlette or uvicorn."""
    done = run(
        "import sys\n"
        "from anchortrack._cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "assert not {'starlette', 'uvicorn'} & set(sys.modules), 'web stack imported'\n"
    )

    assert 0 == done.returncode, done.stderr
    assert "usage: anchortrack" in done.stdout


def test_one_docstring_style_without_sphinx_roles() -> None:
    """The library and the server write references as plain backticks, never Sphinx roles."""
    package = Path(anchortrack.__file__).resolve().parent
    offenders = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r":(class|func|meth|mod|attr|data|exc):`", line)
    ]
    assert [] == offenders


TOY_PROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "toy"
version = "0"

[dependency-groups]
dev = ["pytest"]
"""


def _freeze(python: Path) -> str:
    """``pip freeze --all`` of the environment of *python* (pip itself included)."""
    return subprocess.run(
        [python, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip


def _calling_venv(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A throwaway venv, as the README has the user make, and the environment of a shell that activated it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "VIRTUAL_ENV": str(venv),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    return venv / "bin" / "python", env


@pytest.mark.slow
@pytest.mark.timeout(600)  # three venvs made, two pip upgrades and two installs
def test_scripts_test_makes_its_own_venv_once_and_leaves_the_callers_as_it_was(tmp_path: Path) -> None:
    """
    The README's test command in a brand-new venv with the pip it ships: it makes .venv-test (its own
    pip upgraded there, the dev group installed) and runs pytest in it (``--version`` here); the
    calling venv gains no package and keeps its pip. A second run reuses .venv-test; a changed
    pyproject.toml makes it again.
    """
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "toy").mkdir()
    (project / "toy" / "__init__.py").touch()
    (project / "pyproject.toml").write_text(TOY_PROJECT, encoding="utf-8")
    script = project / "scripts" / "test"
    script.write_bytes((ROOT / "scripts" / "test").read_bytes())
    script.chmod(0o755)
    python, env = _calling_venv(tmp_path)
    before = _freeze(python)

    def run_it() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), "--version"], capture_output=True, text=True, env=env, timeout=600, check=False
        )

    first, second = run_it(), run_it()
    (project / "pyproject.toml").write_text(TOY_PROJECT + "# changed\n", encoding="utf-8")
    third = run_it()

    assert 0 == first.returncode, first.stderr
    assert re.match(r"pytest \d+", first.stdout), first.stdout
    made = "scripts/test: making the test environment .venv-test (pip install -e . --group dev)\n"
    assert first.stderr.startswith(made)  # then what pip itself says, if anything
    assert (0, first.stdout, "") == (second.returncode, second.stdout, second.stderr)
    assert (0, first.stdout) == (third.returncode, third.stdout)
    assert third.stderr.startswith(made)
    assert before == _freeze(python)  # not a package more, and the same pip
    own = _freeze(project / ".venv-test" / "bin" / "python")
    assert re.search(r"^pytest==", own, re.M), own
    pip = re.search(r"^pip==(\d+)\.(\d+)", own, re.M)
    assert pip is not None, own
    assert (int(pip[1]), int(pip[2])) >= (25, 1), own


@pytest.mark.timeout(1200)  # .venv-test is made first where it is missing (scripts/test itself has made it)
def test_the_suite_s_command_leaves_the_calling_venv_unchanged(tmp_path: Path) -> None:
    """
    ``scripts/test --co -q tests/test_packaging.py`` from a fresh venv: pytest runs (in .venv-test,
    made once and then reused) and the venv it was called from is what it was, package for package.
    """
    python, env = _calling_venv(tmp_path)
    before = _freeze(python)

    done = subprocess.run(
        [str(ROOT / "scripts" / "test"), "--co", "-q", "tests/test_packaging.py"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=1200, check=False,
    )  # fmt: skip

    assert 0 == done.returncode, done.stdout[-2000:] + done.stderr[-2000:]
    assert "test_the_suite_s_command_leaves_the_calling_venv_unchanged" in done.stdout
    assert before == _freeze(python)


def test_the_benchmarks_import_nothing_from_the_tests() -> None:
    """What both need (a redis-server, the local server in a process) lives in benchmarks/_support.py."""
    offenders = [
        f"{path.name}: {module}"
        for path in sorted((ROOT / "benchmarks").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for module in (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        )
        if module == "tests" or module.startswith("tests.")
    ]

    assert [] == offenders
