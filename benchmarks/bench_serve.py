"""
`anchortrack serve` as a team's gateway under load, and vLLM's agentic-api beside it when installed.

Every server runs as its own process in front of one fake Chat Completions / Responses provider on
loopback (an asyncio server in this process, keep-alive, a short accept queue), and is driven by cheap
async HTTP clients:

1. Load: N concurrent tool-calling conversations (N = 8 and 32), each ``--turns`` chained requests
   (a user message, the model's tool call, its output, the model's answer, …): requests/s, p50/p99
   latency, errors, the server's CPU seconds per request (``/proc``), and the TCP connections the
   provider accepted.  Targets: ``serve`` on the memory store, on SQLite, and ``agentic-server``
   (``pip install agentic-api``), each figure also as a ratio to agentic-api's in the same run.
2. Depth: one conversation ``--depth`` requests deep against the scripted model: mean per-request
   time at depth ~10 and at the end, and their ratio (memory and SQLite).
3. Memory: the memory store's RSS growth per 1,000 stored responses, unbounded and with
   ``--max-responses`` a fifth of the load (when the server has the flag).
4. Shutdown: a request still answering when ``--shutdown-timeout 1`` runs out: its status, content
   type, and the traceback lines the server logged.

The load runs ``--rounds`` times, the servers taking turns within each round (all of them are up
from the start, idle but for their turn), and each figure is the median over the rounds: on a
shared machine the others' load drifts within minutes, so only figures taken side by side compare.
``--baseline DIR`` adds ``serve`` from another checkout (e.g. the main branch) to those rounds, for a
before/after table in one run; ``--source DIR`` runs every ``serve`` from another checkout.
``--smoke`` runs toy sizes in a few seconds (the test suite runs it).

    python benchmarks/bench_serve.py [--smoke] [--rounds R] [--baseline DIR] [--source DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx


ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]


# -- the fake provider -------------------------------------------------------------------------------


class FakeProvider:
    """Chat Completions and Responses on loopback, keep-alive, answering from the last item's kind."""

    def __init__(self, backlog: int) -> None:
        self.backlog = backlog
        self.connections = 0
        self.requests = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            asyncio.get_running_loop().stop()

        asyncio.run_coroutine_threadsafe(stop(), self._loop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(self.backlog)
        self.port = sock.getsockname()[1]
        self._loop.run_until_complete(asyncio.start_server(self._serve, sock=sock, backlog=self.backlog))
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                payload = self._answer(method, path, json.loads(body) if body else {})
                if b"SLOW" in body:
                    await asyncio.sleep(30)
                data = json.dumps(payload).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def _answer(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if method == "GET":
            return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
        self.requests += 1
        n = self.requests
        if path.endswith("/chat/completions"):
            last = (body.get("messages") or [{}])[-1]
            if last.get("role") == "user" and body.get("tools"):
                call = {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"},
                }
                message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
                finish = "tool_calls"
            else:
                message, finish = {"role": "assistant", "content": f"answer {n}"}, "stop"
            return {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake-model"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        items = body.get("input") or [{}]
        last = items[-1] if isinstance(items, list) else {"role": "user"}
        if last.get("role") == "user" and body.get("tools"):
            output = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": "lookup",
                      "arguments": "{}", "status": "completed"}  # fmt: skip
        else:
            text = {"type": "output_text", "text": f"answer {n}", "annotations": []}
            output = {"type": "message", "id": f"msg_{n}", "status": "completed", "role": "assistant",
                      "content": [text]}  # fmt: skip
        return {
            "id": f"resp_up{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model", "fake-model"),
            "output": [output],
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }  # fmt: skip


# -- the servers ---------------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    process: subprocess.Popen[str]
    base_url: str
    log: Path

    def cpu(self) -> float:
        """CPU seconds of every thread of the process, to the nanosecond (``schedstat``), else in ticks."""
        try:
            tasks = Path(f"/proc/{self.process.pid}/task").iterdir()
            return sum(int((task / "schedstat").read_text().split()[0]) for task in tasks) / 1e9
        except (OSError, ValueError):
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / TICK

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(source: Path, workdir: Path, *options: str, name: str = "serve") -> Iterator[Server]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    log = workdir / f"serve-{time.monotonic_ns()}.log"
    command = [sys.executable, "-m", "anchortrack", "serve", "--port", "0", *options]
    with log.open("w") as err:
        process = subprocess.Popen(
            command, cwd=source, env=env, stdout=subprocess.PIPE, stderr=err, text=True
        )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if " at " not in line:
            raise RuntimeError(f"serve did not start: {log.read_text()[-2000:]}")
        yield Server(name, process, line.split(" at ")[1].split(" ")[0], log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def agentic_binary() -> str | None:
    try:
        from agentic_api.binary import find_packaged_binary  # type: ignore[import-not-found]

        return str(find_packaged_binary("agentic-server"))
    except Exception:
        return shutil.which("agentic-server")


@contextmanager
def agentic(binary: str, upstream: str, workdir: Path) -> Iterator[Server]:
    port = free_port()
    log = workdir / "agentic.log"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(workdir),
        "OPENAI_API_KEY": "test",
        "NO_COLOR": "1",
    }
    command = [binary, "--llm-api-base", upstream, "--gateway-host", "127.0.0.1", "--gateway-port", str(port),
               "--db-url", f"sqlite://{workdir / 'agentic.db'}?mode=rwc", "--llm-ready-timeout-s", "20",
               "--llm-ready-interval-s", "0.1"]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"agentic-server did not start: {log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield Server("agentic-api", process, f"http://127.0.0.1:{port}/v1", log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


# -- the load --------------------------------------------------------------------------------------------


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[str, int] = field(default_factory=dict)

    def failed(self, why: str) -> None:
        self.errors += 1
        self.statuses[why] = self.statuses.get(why, 0) + 1


async def conversation(client: httpx.AsyncClient, turns: int, load: Load, name: str) -> None:
    previous: str | None = None
    pending_call: str | None = None
    for turn in range(turns):
        if pending_call is not None:
            new = [
                {"type": "function_call_output", "call_id": pending_call, "output": f"{name} result {turn}"}
            ]
        else:
            new = [{"role": "user", "content": f"{name} turn {turn}"}]
        body: dict[str, Any] = {"model": "fake-model", "input": new, "tools": TOOLS}
        if previous is not None:
            body["previous_response_id"] = previous
        started = time.perf_counter()
        try:
            answer = await client.post("/responses", json=body)
            load.latencies.append(time.perf_counter() - started)
            if answer.status_code != 200:
                load.failed(f"HTTP {answer.status_code} {answer.text[:80]}")
                previous, pending_call = None, None
                continue
            reply = answer.json()
        except httpx.HTTPError as error:
            load.failed(type(error).__name__)
            previous, pending_call = None, None
            continue
        previous = reply["id"]
        calls = [item["call_id"] for item in reply["output"] if item.get("type") == "function_call"]
        pending_call = calls[0] if calls else None


def run_load(server: Server, provider: FakeProvider, conversations: int, turns: int) -> dict[str, Any]:
    load = Load()

    async def main() -> None:
        limits = httpx.Limits(max_connections=conversations, max_keepalive_connections=conversations)
        headers = {"authorization": "Bearer bench"}
        async with httpx.AsyncClient(
            base_url=server.base_url, timeout=120, limits=limits, headers=headers
        ) as c:
            await asyncio.gather(*(conversation(c, turns, load, f"c{n}") for n in range(conversations)))

    connections, cpu, started = provider.connections, server.cpu(), time.perf_counter()
    asyncio.run(main())
    elapsed, requests = time.perf_counter() - started, len(load.latencies)
    ordered = sorted(load.latencies) or [0.0]
    return {
        "requests": requests,
        "errors": load.errors,
        "rps": requests / elapsed,
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "cpu_ms_per_request": 1000 * (server.cpu() - cpu) / max(requests, 1),
        "upstream_connections": provider.connections - connections,
        "failures": load.statuses,
    }


def run_depth(server: Server, depth: int) -> dict[str, float]:
    """
    Per-request cost along one chain *depth* deep (scripted model: no upstream cost): the server's CPU
    time (robust on a shared machine) and the wall time, over requests 6-15 and over the last ten.
    """
    wall: list[float] = []
    cpu: list[float] = []
    previous: str | None = None
    with httpx.Client(base_url=server.base_url, timeout=120, headers={"authorization": "Bearer d"}) as client:
        for turn in range(depth):
            body: dict[str, Any] = {"model": "scripted", "input": f"turn {turn}"}
            if previous is not None:
                body["previous_response_id"] = previous
            cpu.append(server.cpu())
            started = time.perf_counter()
            answer = client.post("/responses", json=body)
            wall.append(time.perf_counter() - started)
            answer.raise_for_status()
            previous = answer.json()["id"]
        cpu.append(server.cpu())
    shallow, deep = slice(5, 15), slice(depth - 10, depth)

    def per_request(window: slice) -> tuple[float, float]:
        requests = window.stop - window.start
        return 1000 * (cpu[window.stop] - cpu[window.start]) / requests, 1000 * statistics.mean(wall[window])

    (cpu10, wall10), (cpu_deep, wall_deep) = per_request(shallow), per_request(deep)
    return {
        "cpu_ms_at_10": cpu10,
        f"cpu_ms_at_{depth}": cpu_deep,
        "cpu_ratio": cpu_deep / max(cpu10, 1e-9),
        "wall_ms_at_10": wall10,
        f"wall_ms_at_{depth}": wall_deep,
        "wall_ratio": wall_deep / wall10,
    }


def run_depth_in_process(store: str, depth: int) -> dict[str, float]:
    """
    The server's own cost along one chain *depth* deep, without HTTP and with a model that answers in
    constant time (so what grows with depth is the server's): CPU ms per request at depth ~10 and at
    the end, and their ratio.
    """
    from anchortrack.server import ModelReply, ServerState

    class Constant:
        def respond(self, context: Any, *, instructions: Any = None) -> ModelReply:
            message = {"type": "message", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": "ok", "annotations": []}]}  # fmt: skip
            return ModelReply(status="completed", output=[{"id": f"msg_{time.perf_counter_ns()}", **message}])

    state = ServerState(store, model=Constant(), record=False)
    cpu: list[float] = []
    previous: str | None = None
    for turn in range(depth):
        body: dict[str, Any] = {"model": "m", "input": f"turn {turn}"}
        if previous is not None:
            body["previous_response_id"] = previous
        cpu.append(time.process_time())
        pending = state.prepare(body)
        state.save_final(pending)
        previous = pending.response["id"]
    cpu.append(time.process_time())
    state.close()
    shallow = 1000 * (cpu[15] - cpu[5]) / 10
    deep = 1000 * (cpu[depth] - cpu[depth - 10]) / 10
    return {"cpu_ms_at_10": shallow, f"cpu_ms_at_{depth}": deep, "cpu_ratio": deep / max(shallow, 1e-9)}


def run_memory(server: Server, responses: int) -> dict[str, float]:
    """RSS growth per 1,000 responses stored (a user message and the scripted answer each)."""
    with httpx.Client(base_url=server.base_url, timeout=60, headers={"authorization": "Bearer m"}) as client:
        for n in range(50):  # warm up
            client.post("/responses", json={"model": "scripted", "input": f"warm {n}"})
        before = server.rss_mb()
        text = "x" * 2000  # a tool result's size
        for n in range(responses):
            client.post("/responses", json={"model": "scripted", "input": f"{n} {text}"}).raise_for_status()
        after = server.rss_mb()
    return {"responses": responses, "rss_mb": after, "mb_per_1000": 1000 * (after - before) / responses}


def run_shutdown(source: Path, workdir: Path, provider: FakeProvider) -> dict[str, Any]:
    """A request still waiting on the provider when the shutdown timeout runs out."""
    with serve(source, workdir, "--upstream", provider.base_url, "--shutdown-timeout", "1") as server:
        result: dict[str, Any] = {}

        def send() -> None:
            with httpx.Client(base_url=server.base_url, timeout=60) as client:
                answer = client.post("/responses", json={"model": "m", "input": "SLOW"})
                result.update(status=answer.status_code, type=answer.headers.get("content-type", ""))
                result["openai_shape"] = answer.text.startswith('{"error"')

        thread = threading.Thread(target=send)
        thread.start()
        time.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(30)
        thread.join(30)
        log = server.log.read_text()
    result["traceback_lines"] = sum(
        1 for line in log.splitlines() if line.startswith(("  File ", "Traceback"))
    )
    return result


# -- the report ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="toy sizes (seconds)")
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout to run the servers from")
    parser.add_argument("--conversations", default="8,32", help="concurrent conversations (default: 8,32)")
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--depth", type=int, default=300)
    parser.add_argument("--memory-responses", type=int, default=5000)
    parser.add_argument("--backlog", type=int, default=8, help="the provider's accept queue (default: 8)")
    parser.add_argument("--no-agentic", action="store_true", help="leave agentic-api out")
    parser.add_argument(
        "--rounds", type=int, default=3, help="load rounds, the servers taking turns (default: 3)"
    )
    parser.add_argument("--baseline", type=Path, help="also load serve from this checkout (before/after)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.conversations, args.turns, args.depth, args.memory_responses, args.rounds = "2", 4, 40, 100, 1
    sizes = [int(n) for n in args.conversations.split(",")]
    results: dict[str, Any] = {"load": {}, "depth": {}, "memory": {}}
    binary = None if args.no_agentic or args.smoke else agentic_binary()
    with tempfile.TemporaryDirectory() as tmp, FakeProvider(args.backlog) as provider:
        workdir = Path(tmp)
        stores = {"memory": "memory", "sqlite": f"sqlite:{workdir / 'serve.db'}"}
        sources = {"serve": args.source, **({"before": args.baseline} if args.baseline else {})}
        with ExitStack() as stack:
            servers = [
                stack.enter_context(serve(source, workdir, "--store", store.replace("serve.db", f"{who}.db"),
                                          "--upstream", provider.base_url, name=f"{who}-{kind}"))
                for who, source in sources.items() for kind, store in stores.items()
            ]  # fmt: skip
            if binary is not None:
                servers.append(stack.enter_context(agentic(binary, provider.base_url, workdir)))
            results["load"] = load_rounds(servers, provider, sizes, args.turns, args.rounds)
        for name, store in stores.items():
            with serve(args.source, workdir, "--store", store.replace("serve.db", "depth.db")) as server:
                results["depth"][f"serve-{name}"] = run_depth(server, args.depth)
            in_process = store.replace("serve.db", "in-process.db")
            command = [sys.executable, __file__, "--in-process-depth", in_process, str(args.depth)]
            env = {**os.environ, "PYTHONPATH": str(args.source)}
            answer = subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=600)
            results["depth"][f"server-{name} (in process)"] = json.loads(answer.stdout)
        with serve(args.source, workdir) as server:
            results["memory"]["unbounded"] = run_memory(server, args.memory_responses)
        bound = str(max(1, args.memory_responses // 5))
        try:
            with serve(args.source, workdir, "--max-responses", bound) as server:
                results["memory"][f"max-responses {bound}"] = run_memory(server, args.memory_responses)
        except RuntimeError:
            results["memory"][f"max-responses {bound}"] = "not supported"
        results["shutdown"] = run_shutdown(args.source, workdir, provider)
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


def load_rounds(
    servers: list[Server], provider: FakeProvider, sizes: list[int], turns: int, rounds: int
) -> dict[str, dict[str, Any]]:
    """Each size's load on each server, *rounds* times in turn; the medians (and sums of counts), with
    ratios to agentic-api's medians when it ran."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for size in sizes:
            for server in servers:
                runs.setdefault(f"{server.name}/N={size}", []).append(run_load(server, provider, size, turns))
    load: dict[str, dict[str, Any]] = {}
    for key, rows in runs.items():
        row = {name: statistics.median(r[name] for r in rows) for name in MEDIANS}
        row.update(
            {name: sum(r[name] for r in rows) for name in ("requests", "errors", "upstream_connections")}
        )
        row["failures"] = {
            why: sum(r["failures"].get(why, 0) for r in rows) for r in rows for why in r["failures"]
        }
        row["rounds"] = len(rows)
        load[key] = row
    for key, row in load.items():
        theirs = load.get(f"agentic-api/N={key.split('=')[1]}")
        if theirs is not None and not key.startswith("agentic-api"):
            row["rps_ratio"] = row["rps"] / theirs["rps"]
            row["cpu_ratio"] = row["cpu_ms_per_request"] / theirs["cpu_ms_per_request"]
            row["p50_ratio"] = row["p50_ms"] / theirs["p50_ms"]
            row["p99_ratio"] = row["p99_ms"] / theirs["p99_ms"]
    return load


MEDIANS = ("rps", "p50_ms", "p99_ms", "cpu_ms_per_request")


def report(results: dict[str, Any]) -> None:
    print("load (fake provider; medians over rounds; ratios to agentic-api's medians in this run)")
    for name, row in results["load"].items():
        ratios = ""
        if "rps_ratio" in row:
            ratios = "  ".join(f"{what} {row[f'{what}_ratio']:.2f}x" for what in ("rps", "cpu", "p50", "p99"))
        latency = f"p50 {row['p50_ms']:6.1f} ms  p99 {row['p99_ms']:7.1f} ms"
        cost = f"cpu {row['cpu_ms_per_request']:5.2f} ms/req  errors {row['errors']:3}"
        links = f"upstream connections {row['upstream_connections']:4}"
        print(f"  {name:24} {row['rps']:7.0f} req/s  {latency}  {cost}  {links}  {ratios}")
    print("depth (serve: scripted model over HTTP; server: constant-time model, no HTTP)")
    for name, row in results["depth"].items():
        print(f"  {name:24} " + "  ".join(f"{key} {value:.2f}" for key, value in row.items()))
    for name, row in results["load"].items():
        if row["failures"]:
            print(f"  failures of {name}: {row['failures']}")
    print("memory store RSS")
    for name, row in results["memory"].items():
        print(f"  {name:24} {row}")
    print(f"shutdown  {results['shutdown']}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--in-process-depth"]:  # run_depth_in_process against the source on PYTHONPATH
        print(json.dumps(run_depth_in_process(sys.argv[2], int(sys.argv[3]))))
    else:
        main()
