"""
Every missing optional dependency names the extra that installs it.

Each case runs an interpreter in which the dependency cannot be imported (its ``sys.modules``
entry is None, set by a ``sitecustomize`` before anything else runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).parents[1]


def _run(tmp_path: Path, missing: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in missing), encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_metrics_without_prometheus_client(tmp_path: Path) -> None:
    """import anchortrack.metrics names the prometheus extra."""
    proc = _run(
        tmp_path,
        ["prometheus_client"],
        "-c",
        "try:\n    import anchortrack.metrics\nexcept ImportError as error:\n    print(error)\n",
    )

    assert 0 == proc.returncode, proc.stderr
    assert (
        "anchortrack.metrics needs the prometheus extra (prometheus_client is missing): "
        "pip install 'anchortrack[prometheus]'\n"
    ) == proc.stdout


@pytest.mark.parametrize(("module", "failing"), [("uvicorn", 1), ("starlette", 2), ("h2", 1)])
def test_server_without_the_web_stack(tmp_path: Path, module: str, failing: int) -> None:
    """anchortrack.server imports; what needs the web stack (ResponsesServer; create_app) or h2 (the upstream
    client, HTTP/2 to a provider) names the extra."""
    code = (
        "import anchortrack.server\n"
        "for name in ('ResponsesServer', 'create_app', 'Upstream'):\n"
        "    try:\n"
        "        getattr(anchortrack.server, name)\n"
        "    except ImportError as error:\n"
        "        print(error)\n"
    )
    proc = _run(tmp_path, [module], "-c", code)

    assert 0 == proc.returncode, proc.stderr
    lines = proc.stdout.splitlines()
    assert failing == len(lines)
    assert all(f"({module} is missing): pip install 'anchortrack[server]'" in line for line in lines)


def test_examples_without_the_web_stack(tmp_path: Path) -> None:
    """An example run on a base install says which extra it needs, not "No module named 'uvicorn'"."""
    proc = _run(tmp_path, ["uvicorn"], "examples/tool_loop.py")

    assert 0 != proc.returncode
    assert "needs the server extra (uvicorn is missing): pip install 'anchortrack[server]'" in proc.stderr


def test_the_readme_import_line_on_a_base_install(tmp_path: Path) -> None:
    """from anchortrack.stores import MemoryStore, SQLiteStore, RedisStore works without redis."""
    code = (
        "from anchortrack.stores import MemoryStore, SQLiteStore, RedisStore\n"
        "try:\n"
        "    RedisStore.from_url('redis://localhost')\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    proc = _run(tmp_path, ["redis"], "-c", code)

    assert 0 == proc.returncode, proc.stderr
    assert "RedisStore needs the redis package: pip install 'anchortrack[redis]'\n" == proc.stdout
