"""
The documentation: its examples run, its reason codes match the code, its reference is complete.

Every fenced ``python`` block in ``README.md`` and ``docs/**/*.md`` runs against the local server,
with ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` pointing at it, unless the line before it is an
HTML comment ``<!-- not-run: why -->``. The blocks of one page run in order, in one namespace, in a
fresh interpreter (pages configure logging, set environment variables, start servers).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from anchortrack._plan import REASON_TEXT, Reason
from anchortrack.server import ResponsesServer


ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(?P<why>.*?)\s*-->$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")

#: Runs one page's blocks in one namespace; a block's traceback names the page and its line.
RUNNER = """
import json, sys
blocks = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__"}
for block in blocks:
    source = "\\n" * (block["line"] - 1) + block["code"]
    exec(compile(source, block["page"], "exec"), namespace)
"""


class Block(NamedTuple):
    page: Path
    line: int  # 1-based line of the first code line
    lang: str
    code: str
    not_run: str | None  # the reason given, when marked not to run


def blocks(page: Path) -> Iterator[Block]:
    """Every fenced code block of *page*, dedented (blocks inside admonitions are indented)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence, lang = match["indent"], match["fence"], match["lang"]
        previous = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        marker = NOT_RUN.match(previous)
        start = i + 1
        i = start
        while i < len(lines) and not lines[i].strip().startswith(fence):
            i += 1
        code = "\n".join(line[len(indent) :] if line.startswith(indent) else line for line in lines[start:i])
        yield Block(page, start + 1, lang, code + "\n", marker["why"] if marker else None)
        i += 1


def python_blocks(page: Path) -> list[Block]:
    return [block for block in blocks(page) if block.lang in ("python", "py")]


def _runnable_pages() -> list[Path]:
    return [page for page in PAGES if any(b.not_run is None for b in python_blocks(page))]


@pytest.fixture(scope="module", name="docs_server")
def _docs_server() -> Iterator[ResponsesServer]:
    with ResponsesServer(store="memory") as srv:
        yield srv


@pytest.mark.parametrize("page", _runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run(page: Path, docs_server: ResponsesServer, tmp_path: Path) -> None:
    """The page's Python examples run, in order, against the local server (their asserts included)."""
    runnable = [b for b in python_blocks(page) if b.not_run is None]
    if sys.version_info < (3, 11):  # pydantic-ai-slim needs Python >= 3.11: the dev group skips it here
        runnable = [b for b in runnable if "pydantic_ai" not in b.code]
    spec = tmp_path / "blocks.json"
    payload = [{"page": str(b.page), "line": b.line, "code": b.code} for b in runnable]
    spec.write_text(json.dumps(payload), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANCHORTRACK_", "OPENAI_"))}
    env.update(
        OPENAI_BASE_URL=docs_server.base_url,
        OPENAI_API_KEY="docs-test",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    )
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(spec)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert 0 == done.returncode, f"{page.relative_to(ROOT)}:\n{done.stderr[-4000:]}"


def test_every_python_block_runs_or_says_why_not() -> None:
    """A not-run marker gives a reason, and sits right before a Python block (no stale markers)."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        markers = list(re.finditer(r"<!--\s*not-run\b.*?-->", text))
        marked = [b for b in python_blocks(page) if b.not_run is not None]
        assert len(markers) == len(marked), page
        assert all(b.not_run for b in marked), page
    assert len(_runnable_pages()) >= 10


GUIDE_REASONS = DOCS / "guide" / "reasons.md"


def _reason_sections() -> dict[str, str]:
    """``### `code` `` sections of the fallbacks guide: code → its text."""
    text = GUIDE_REASONS.read_text(encoding="utf-8")
    parts = re.split(r"^### `([a-z_]+)`[^\n]*\n", text, flags=re.M)
    return {parts[i]: parts[i + 1].split("\n## ")[0] for i in range(1, len(parts), 2)}


def test_every_reason_has_a_section_quoting_its_meaning() -> None:
    """docs/guide/reasons.md: a section per `Reason`, quoting its `REASON_TEXT` and saying what to do."""
    sections = _reason_sections()

    assert sorted(sections) == sorted(reason.value for reason in Reason)
    for reason in Reason:
        body = " ".join(sections[reason.value].split())
        assert REASON_TEXT[reason] in body, f"{reason.value}: quote REASON_TEXT in its section"
        assert "**What to do:**" in body, f"{reason.value}: say what to do"


def test_reference_lists_every_public_name(tmp_path: Path) -> None:
    """The strict site build succeeds and its reference pages show every public name with a docstring."""
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert 0 == done.returncode, done.stderr[-4000:]
    operations = (site / "operations" / "index.html").read_text(encoding="utf-8")
    assert "<!-- rows:" not in operations  # the hook in mkdocs.yml made the tables
    for name in ("ANCHORTRACK_MODE", "anchortrack_request_bytes_total", "bytes_would_save"):
        assert f"<code>{name}</code>" in operations, name

    import anchortrack.metrics
    import anchortrack.server
    import anchortrack.stores

    modules = {
        "anchortrack": anchortrack,
        "stores": anchortrack.stores,
        "server": anchortrack.server,
        "metrics": anchortrack.metrics,
    }
    for page, module in modules.items():
        html = (site / "reference" / page / "index.html").read_text(encoding="utf-8")
        for name in module.__all__:
            heading = f'id="{module.__name__}.{name}"'
            assert heading in html, f"{module.__name__}.{name} is missing from the reference"
            section = html.split(heading, 1)[1].split('<div class="doc doc-object', 1)[0]
            assert 'class="doc doc-contents' in section, f"{name}: no contents"
            assert "<p>" in section, f"{name}: no docstring"


def test_reference_pages_read_as_markdown_name_every_public_name() -> None:
    """
    On a forge, a reference page is Markdown, not the built site: before its ``:::`` directive it says
    how to read the full reference (the site, or ``help()``) and names every public name in a table.
    """
    import anchortrack.metrics
    import anchortrack.server
    import anchortrack.stores

    modules = {"anchortrack": anchortrack, "stores": anchortrack.stores, "server": anchortrack.server,
               "metrics": anchortrack.metrics}  # fmt: skip
    for page, module in modules.items():
        text = (DOCS / "reference" / f"{page}.md").read_text(encoding="utf-8")
        plain = text.split("\n::: ", 1)[0]
        assert "scripts/docs" in plain, page
        assert "help(" in plain, page
        named = set(re.findall(r"^\| `([A-Za-z_]+)", plain, re.M)) | set(
            re.findall(r", `([A-Za-z_]+)", "\n".join(re.findall(r"^\| [^|]+\|", plain, re.M)))
        )
        assert sorted(module.__all__) == sorted(named & set(module.__all__)), page
        assert named <= set(module.__all__) | {"name"}, page


def test_benchmark_page_shows_what_bench_bytes_measures(docs_server: ResponsesServer) -> None:
    """docs/benchmarks.md's request-byte table and totals are what benchmarks/bench_bytes.py measures now."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_bytes
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    stateless = bench_bytes.measure(docs_server, wrapped=False)
    chained = bench_bytes.measure(docs_server, wrapped=True)
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")

    rows = re.findall(r"^\| (\d+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \|$", page, re.M)
    assert rows, "the request-bytes table is missing"
    for turn, *figures in rows:
        t = int(turn)
        measured = [stateless[t - 1], chained[t - 1], sum(stateless[:t]), sum(chained[:t])]
        assert [f"{n:,}" for n in measured] == figures, f"turn {t}"
    total_s, total_c = sum(stateless), sum(chained)
    headline = (
        f"**Total: {total_s:,} bytes stateless, {total_c:,} bytes chained: "
        f"a ratio of {total_c / total_s:.3f}**"
    )
    assert headline in page


README = ROOT / "README.md"
QUICKSTART = (
    "pip install -e '.[server]' && anchortrack demo   # the main job: a tool-calling agent against "
    "the built-in local server, no API key\n"
    "scripts/test                                     # the whole test suite, in a venv of its own "
    "(.venv-test/, made once with the dev group; this one is left as it is) "
    "and Debian's redis-server if missing\n"
)


def quickstart_commands(text: str) -> list[str]:
    """The commands of the README's quickstart block, without their comments."""
    block = text.split("## Quickstart", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_ci_runs_the_quickstart_first_verbatim_in_a_venv_it_did_not_upgrade() -> None:
    """
    .ci/run's first commands are the README's two, as whole lines, after a fresh venv and no pip.

    The second is the whole suite, so CI's full run is the README's literal test command, with the
    pip that ``python3 -m venv`` ships.
    """
    commands = quickstart_commands(README.read_text(encoding="utf-8"))
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    code = [line for line in ci if line and not line.startswith("#")]

    assert ["pip install -e '.[server]' && anchortrack demo", "scripts/test"] == commands
    first = code.index(commands[0])
    assert commands[1] == next(
        line for line in code[first + 1 :] if not line.startswith(("cost ", "pip freeze"))
    )
    before = code[:first]
    assert "python3 -m venv .ci/venv" in before
    assert [] == [line for line in before if "pip install" in line or "ensurepip" in line]
    assert 1 == ci.count("scripts/test")
    script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    assert script.rstrip().endswith('exec python -m pytest -p no:cacheprovider "$@"')
    # The test command leaves the quickstart venv as it was: pip freeze before and after, compared.
    after = code[code.index(commands[1]) :]
    assert after[1].startswith("pip freeze --all | diff .ci/quickstart-freeze.log -"), after[1]
    assert "pip freeze --all >.ci/quickstart-freeze.log" == code[code.index(commands[1]) - 1]


def test_readme_keeps_the_two_commands_and_links_only_to_files_that_exist() -> None:
    """The README's quickstart is unchanged and its relative links resolve."""
    text = README.read_text(encoding="utf-8")

    assert QUICKSTART in text
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert local, "the README links into the documentation"
    for link in local:
        assert (ROOT / link).exists(), link
    # Every figure of the README's benchmark table is the benchmarks page's (one source, no drift).
    section = text.split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 8
    for row in rows:
        for figure in re.findall(r"\d[\d,]*(?:\.\d+)?", row.split("|")[2]):
            assert re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d,]|\.\d)", page), (figure, row)


def test_the_code_page_names_every_module_of_the_library_once() -> None:
    """docs/code.md, the newcomer's map, names each library module once, and only modules that exist."""
    text = (DOCS / "code.md").read_text(encoding="utf-8")
    package = ROOT / "anchortrack"
    modules = sorted(
        str(path.relative_to(ROOT)) for path in [*package.glob("*.py"), *(package / "stores").glob("*.py")]
    )
    rows = re.findall(r"^\| `(anchortrack/[\w/]+\.py)` \|", text, flags=re.MULTILINE)
    named = set(re.findall(r"`(anchortrack/[\w/]+\.py)`", text))
    assert sorted(named) == modules
    assert len(rows) == len(set(rows)), "a module with two rows"


@pytest.mark.slow
def test_the_readme_quotes_what_the_25_turn_demo_sends(tmp_path: Path) -> None:
    """README's "--turns 25 about N%" is the share of stateless input bytes that run's stats report."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANCHORTRACK_MODE"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "anchortrack", "demo", "--turns", "25"],
        capture_output=True, text=True, env=env, timeout=300, check=True,
    )  # fmt: skip
    out = " ".join(done.stdout.split())
    sent, stateless = (
        int(n.replace(",", "")) for n in re.findall(r"~([\d,]+) sent of ~([\d,]+) stateless", out)[0]
    )
    text = " ".join(README.read_text(encoding="utf-8").split())
    quoted = float(re.findall(r"`anchortrack demo --turns 25` about ([\d.]+)%", text)[0])

    assert round(100 * sent / stateless) == quoted


def _first_column(text: str, heading: str) -> set[str]:
    """The backticked names in the first column of the first table under the line *heading* starts."""
    table = text.split(heading, 1)[1].split("\n|", 1)[1].split("\n\n", 1)[0]
    cells = [line.split("|")[1] for line in table.splitlines()[1:] if line.startswith("|")]
    return {name for cell in cells for name in re.findall(r"`([\w.]+)`", cell)}


def _tables() -> Any:
    """scripts/docs_tables.py, the mkdocs hook that makes the tables marked ``<!-- rows: NAME -->``."""
    spec = importlib.util.spec_from_file_location("docs_tables", ROOT / "scripts" / "docs_tables.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _operations() -> str:
    """docs/operations.md as the site shows it, its tables made from the code's rows."""
    return str(_tables().render((DOCS / "operations.md").read_text(encoding="utf-8")))


def test_the_operations_page_lists_every_snapshot_key_and_metric() -> None:
    """docs/operations.md has a row for each key of ``Stats.snapshot()`` and each Prometheus series."""
    pytest.importorskip("prometheus_client")
    from anchortrack import Stats
    from anchortrack._stats import METRICS, merge_snapshots
    from anchortrack.metrics import _families

    text = _operations()
    groups = {m.group for m in METRICS if m.group is not None}
    snapshot = Stats().snapshot()
    keys = {key for key in snapshot if key not in groups and key != "requests"}  # `requests`: by decision
    keys |= {f"{group}.{sub}" for group in groups for sub in snapshot[group]}
    assert _first_column(text, "The other keys of\n`snapshot()`") == keys
    families = list(_families(merge_snapshots([])))
    series = {f.name + ("_total" if f.type == "counter" else "") for f in families}
    assert _first_column(text, "| metric | type | labels |") == series


def test_the_vocabulary_table_has_a_row_for_each_outcome_field() -> None:
    """
    "One record, one vocabulary" names every `Outcome` field, in order, under its own name as the event
    key and ``anchortrack.<field>`` as the span attribute; a field a `METRICS` row counts under its own
    name shows that snapshot key and that Prometheus series.
    """
    import attrs

    from anchortrack._outcome import Outcome
    from anchortrack._stats import METRICS

    table = _operations().split("| `Outcome` field |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    assert list(rows) == [field.name for field in attrs.fields(Outcome)]
    for name, (_, snapshot, event, span, prometheus, _) in rows.items():
        assert event.startswith(f"`{name}`"), name
        assert span == f"`anchortrack.{name}`", name
        for m in METRICS:
            if m.field == name and m.key == name:
                assert f"`{m.key}`" in snapshot, name
                assert m.metric is not None
                assert m.metric in prometheus, name


def test_the_operations_page_lists_every_environment_variable() -> None:
    """
    Every ``ANCHORTRACK_*`` variable the package reads has its row in docs/operations.md's table: the
    library's made from its settings rows, the server's (which imports nothing of the library) written.
    """
    source = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "anchortrack").rglob("*.py"))
    read = set(re.findall(r"[\"'](ANCHORTRACK_[A-Z_]+)[\"']", source))
    listed = _first_column(_operations(), "| variable | what it sets |")
    missing = [
        f"| `{name}` | what it sets ([page](page.md)) | against code | read | a bad value |"
        for name in read - listed
    ]
    assert not missing, "add to docs/operations.md's environment table:\n" + "\n".join(missing)
    assert len(read) >= 5
    assert listed == read


def test_the_item_tables_are_made_from_the_rows_of_both_sides() -> None:
    """The guide's item table has one line per row of the library's ``ITEM_TYPES``, and docs/server.md's
    bridge and error tables one per bridged and paired call of the server's: a new type needs no docs edit."""
    from anchortrack._canonical import ITEM_TYPES
    from anchortrack.server._items import CALLS, bridged_call

    tables = _tables()
    guide = tables.render((DOCS / "guide" / "anchors.md").read_text(encoding="utf-8"))
    server = tables.render((DOCS / "server.md").read_text(encoding="utf-8"))

    assert list(ITEM_TYPES) == re.findall(r"^\| `(\w+)` \|", guide, flags=re.MULTILINE)
    assert "| `function_call_output` | `id`, `status` |  | `function_call` by `call_id` |" in guide
    assert "| `mcp_list_tools` |  | yes |  | `tools[].input_schema`, `tools[].annotations` |" in guide
    for kind, row in CALLS.items():
        if bridged_call(kind) is not None:
            assert f"| `{row.tool}` | `{kind}` " in server, kind
        if row.paired and kind != "function_call":
            assert f"Same two checks for `{kind}` / `{row.output}` |" in server, kind
    custom = "`custom_tool_call` with `input` restored verbatim | `function_call` named as requested |"
    assert f"| `custom` | {custom}" in server


def test_every_rows_marker_names_a_table_made_once() -> None:
    """Each ``<!-- rows: NAME -->`` line names a table of scripts/docs_tables.py; each table is used once."""
    tables = _tables()
    used = [m["name"] for page in PAGES for m in tables.MARKER.finditer(page.read_text(encoding="utf-8"))]
    assert sorted(used) == sorted(tables.TABLES)
    assert "<!-- rows:" not in _operations()
