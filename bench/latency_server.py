"""A local OpenAI-compatible chat-completions server that answers after a fixed latency, as a
hosted API would: for measuring pbench's concurrency and overhead without a model.

    python bench/latency_server.py --latency 0.5 --port 8765 [--require-key KEY]

Free-text requests get a short sentence that varies with the request (its last message and
seed); requests with a ``json_schema`` response format get a minimal instance of the schema.
Each request sleeps in its own thread, so requests overlap as they would against a hosted
API. It also serves the Batch API (``/v1/files``, ``/v1/batches``): a batch's items get the
answers the live endpoint gives the same requests, and a test can hold batches in progress,
leave items unanswered, or end a batch expired or cancelled (``LatencyServer`` attributes).
It speaks Anthropic's Messages API too (``/v1/messages``, and its Message Batches under
``/v1/messages/batches``), with the same answers by batch as live and the same knobs; an
Anthropic client takes ``server.root`` as its base URL. The server counts the requests it
answered, those it refused for a wrong or missing key, and the most it had in flight at once. The server is stdlib only; ``config_for`` binds a
parameter file's roles to it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import signal
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SUBJECTS = ("the garden party", "last week's match", "the new job", "the trip to the coast", "the book club",
            "the flat upstairs", "the bakery on the corner", "the weekend plans")
VERBS = ("came up again", "went better than expected", "is still on my mind", "was a lot of fun",
         "needs a bit more thought", "turned out fine")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def sentence(digest: bytes) -> str:
    """A plain sentence picked by ``digest`` (so replies vary with the request; 8,064 of them)."""
    return (f"I was just thinking that {SUBJECTS[digest[0] % len(SUBJECTS)]} {VERBS[digest[1] % len(VERBS)]}, "
            f"shall we talk it over on {DAYS[digest[2] % len(DAYS)]} at {digest[3] % 12 + 1}?")


def instance(schema: dict[str, Any], root: dict[str, Any] | None = None, array_items: int = 0,
             tag: str = "x") -> Any:
    """A minimal value valid against a JSON schema (the subset pydantic emits).

    Args:
        schema: the (sub)schema.
        root: the whole schema, where ``$ref`` pointers are resolved (default: ``schema``).
        array_items: items per array beyond ``minItems`` (within ``maxItems``); 0 gives the minimum.
        tag: text that makes generated strings differ between requests.
    """
    root = schema if root is None else root
    if "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        return instance(node, root, array_items, tag)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return instance(schema[key][0], root, array_items, tag)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: instance(props.get(k, {}), root, array_items, tag) for k in schema.get("required", [])}
    if kind == "array":
        n = max(schema.get("minItems", 0), array_items)
        n = min(n, schema.get("maxItems", n))
        return [instance(schema.get("items", {}), root, array_items, f"{tag}{i + 1}") for i in range(n)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        value = max(0, low) if "maximum" not in schema else min(max(0, low), schema["maximum"])
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    if kind == "string":
        text = f"item {tag}".ljust(schema.get("minLength", 0), ".")
        return text[: schema.get("maxLength", len(text))]
    return None


def _words(text: str) -> int:
    return len(text.split())


class LatencyServer(ThreadingHTTPServer):
    """The server and its counters (read them after the requests have finished).

    Args:
        address: (host, port); port 0 picks a free one.
        latency_s: seconds each request waits before its reply.
        require_key: answer only requests carrying ``Authorization: Bearer <require_key>``
            (the others get 401 and are counted in ``rejected``); None accepts any.
        array_items: items per JSON array beyond the schema's minimum (see ``instance``).
    """

    daemon_threads = True
    request_queue_size = 256  # the default 5 drops connections when many clients open at once

    def __init__(self, address: tuple[str, int], latency_s: float, require_key: str | None = None,
                 array_items: int = 0) -> None:
        super().__init__(address, _Handler)
        self.latency_s = latency_s
        self.require_key = require_key
        self.array_items = array_items
        self.requests = 0  # answered
        self.rejected = 0  # refused for a wrong or missing key
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        # The Batch API: what a test sets, and what it counts.
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.batch_items = 0  # requests submitted in batches
        self.hold = threading.Event()  # cleared: batches stay in progress until it is set
        self.hold.set()
        self.batch_end: Any = lambda n: "completed"  # the final status of the n-th batch (1, 2, ...)
        self.unanswered: Any = lambda n, custom_id: False  # items the n-th batch leaves unanswered
        self.failed_downloads = 0  # downloads of a batch's output to answer with HTTP 500 first
        # Anthropic's Message Batches, under the same knobs: an item left unanswered is
        # ``errored`` in a completed batch, ``expired`` in an expired one and ``canceled`` in a
        # cancelled one (which the provider itself cancels).
        self.message_batches: dict[str, dict[str, Any]] = {}
        self.message_results: dict[str, bytes] = {}

    @property
    def url(self) -> str:
        """The base URL an OpenAI client takes (ends in ``/v1``)."""
        return f"{self.root}/v1"

    @property
    def root(self) -> str:
        """The base URL an Anthropic client takes (it adds ``/v1/messages``)."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def reset(self) -> None:
        """Zero the counters (between two measured settings)."""
        with self._lock:
            self.requests = self.rejected = self.max_in_flight = 0

    def answer(self, request: dict[str, Any]) -> str:
        """The reply's text: a minimal instance of a requested ``json_schema``, else a sentence
        (subclasses answer otherwise)."""
        messages = request.get("messages", [])
        last = messages[-1].get("content", "") if messages else ""
        digest = hashlib.sha256(f"{request.get('seed')}|{last}".encode()).digest()
        fmt = request.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            return json.dumps(instance(fmt["json_schema"]["schema"], array_items=self.array_items, tag=digest.hex()[:6]))
        return sentence(digest)

    def new_batch(self, request: dict[str, Any]) -> dict[str, Any]:
        """Create a batch over an uploaded file (``POST /v1/batches``); it runs in a thread."""
        lines = [json.loads(x) for x in self.files[request["input_file_id"]].decode().splitlines() if x.strip()]
        with self._lock:
            n = len(self.batches) + 1
            self.batch_items += len(lines)
            batch = {"id": f"batch_{uuid.uuid4().hex[:24]}", "object": "batch", "endpoint": request["endpoint"],
                     "input_file_id": request["input_file_id"], "completion_window": request["completion_window"],
                     "status": "in_progress", "created_at": int(time.time()), "output_file_id": None,
                     "error_file_id": None, "request_counts": {"total": len(lines), "completed": 0, "failed": 0}}
            self.batches[batch["id"]] = batch
        threading.Thread(target=self._run_batch, args=(batch, lines, n), daemon=True).start()
        return dict(batch)

    def _run_batch(self, batch: dict[str, Any], lines: list[dict[str, Any]], n: int) -> None:
        self.hold.wait()
        end = self.batch_end(n)
        out, errors = [], []
        for line in lines:
            if self.unanswered(n, line["custom_id"]):
                if end == "completed":
                    errors.append({"custom_id": line["custom_id"], "response": {"status_code": 500, "body": {
                        "error": {"message": "injected", "type": "server_error"}}}})
                continue
            out.append({"id": f"req_{uuid.uuid4().hex[:12]}", "custom_id": line["custom_id"],
                        "response": {"status_code": 200, "body": self.reply(line["body"])}, "error": None})
        with self._lock:
            for name, records in (("output_file_id", out), ("error_file_id", errors)):
                if records:
                    fid = f"file-{uuid.uuid4().hex[:24]}"
                    self.files[fid] = "".join(json.dumps(r) + "\n" for r in records).encode()
                    batch[name] = fid
            batch["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(errors)}
            batch["status"] = end

    def _served(self) -> None:
        """One request's wait of ``latency_s``, counted in flight meanwhile and answered after."""
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.latency_s)
        finally:
            with self._lock:
                self.in_flight -= 1
                self.requests += 1

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        """The chat-completion body for ``request`` (after waiting ``latency_s``)."""
        self._served()
        messages = request.get("messages", [])
        text = self.answer(request)
        prompt_tokens = sum(_words(str(m.get("content", ""))) for m in messages)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "latency-server"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": _words(text),
                      "total_tokens": prompt_tokens + _words(text)},
        }


    def message(self, request: dict[str, Any]) -> dict[str, Any]:
        """An Anthropic Message for a Messages API ``request`` (after waiting ``latency_s``): a
        forced tool call gets its tool's input, a minimal instance of the tool's schema; else a
        sentence. A function of the request alone, as ``answer`` is (Anthropic takes no seed)."""
        self._served()
        messages = request.get("messages", [])
        last = messages[-1].get("content", "") if messages else ""
        digest = hashlib.sha256(f"None|{last}".encode()).digest()
        choice = request.get("tool_choice") or {}
        tool = next((t for t in request.get("tools", []) if t.get("name") == choice.get("name")), None)
        if choice.get("type") == "tool" and tool is not None:
            content: list[dict[str, Any]] = [{
                "type": "tool_use", "id": f"toolu_{digest.hex()[:24]}", "name": tool["name"],
                "input": instance(tool["input_schema"], array_items=self.array_items, tag=digest.hex()[:6])}]
            out_words, stop = _words(json.dumps(content[0]["input"])), "tool_use"
        else:
            text = sentence(digest)
            content, out_words, stop = [{"type": "text", "text": text}], _words(text), "end_turn"
        read = sum(_words(str(m.get("content", ""))) for m in messages) + _words(str(request.get("system", "")))
        return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
                "model": request.get("model", "latency-server"), "content": content, "stop_reason": stop,
                "stop_sequence": None, "usage": {"input_tokens": read, "output_tokens": out_words,
                                                 "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}

    def new_message_batch(self, request: dict[str, Any]) -> dict[str, Any]:
        """Create a Message Batch over inline requests (``POST /v1/messages/batches``); it runs in a thread."""
        items = request["requests"]
        created = datetime.now(UTC)
        with self._lock:
            n = len(self.batches) + len(self.message_batches) + 1
            self.batch_items += len(items)
            batch = {"id": f"msgbatch_{uuid.uuid4().hex[:24]}", "type": "message_batch",
                     "processing_status": "in_progress", "created_at": created.isoformat(),
                     "expires_at": (created + timedelta(hours=24)).isoformat(), "ended_at": None,
                     "cancel_initiated_at": None, "archived_at": None, "results_url": None,
                     "request_counts": {"processing": len(items), "succeeded": 0, "errored": 0, "canceled": 0,
                                        "expired": 0}}
            self.message_batches[batch["id"]] = batch
        threading.Thread(target=self._run_message_batch, args=(batch, items, n), daemon=True).start()
        return dict(batch)

    def _run_message_batch(self, batch: dict[str, Any], items: list[dict[str, Any]], n: int) -> None:
        self.hold.wait()
        end = self.batch_end(n)
        missed = {"completed": "errored", "expired": "expired", "cancelled": "canceled"}[end]
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        lines = []
        for item in items:
            if self.unanswered(n, item["custom_id"]):
                result: dict[str, Any] = {"type": missed}
                if missed == "errored":
                    result["error"] = {"type": "error", "error": {"type": "api_error", "message": "injected"}}
            else:
                result = {"type": "succeeded", "message": self.message(item["params"])}
            counts[result["type"]] += 1
            lines.append({"custom_id": item["custom_id"], "result": result})
        with self._lock:
            self.message_results[batch["id"]] = "".join(json.dumps(x) + "\n" for x in lines).encode()
            now = datetime.now(UTC).isoformat()
            batch.update(processing_status="ended", ended_at=now, request_counts=counts,
                         results_url=f"{self.root}/v1/messages/batches/{batch['id']}/results")
            if end == "cancelled":
                batch["cancel_initiated_at"] = now


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the OpenAI client expects
    disable_nagle_algorithm = True  # else the body waits ~40 ms for the client's delayed ACK of the headers
    server: LatencyServer

    def _refused(self) -> bool:
        key = self.server.require_key
        if key is not None and self.headers.get("Authorization") != f"Bearer {key}" \
                and self.headers.get("x-api-key") != key:  # OpenAI's header, or Anthropic's
            with self.server._lock:
                self.server.rejected += 1
            self._send(401, {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                                       "code": "invalid_api_key"}})
            return True
        return False

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        parts = urllib.parse.urlparse(self.path).path.strip("/").split("/")
        if self._refused():
            return
        server = self.server
        if parts == ["v1", "batches"]:  # the list, newest first, in one page
            with server._lock:
                data = sorted((dict(b) for b in server.batches.values()), key=lambda b: -b["created_at"])
            self._send(200, {"object": "list", "data": data, "has_more": False,
                             "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None})
        elif parts[:2] == ["v1", "batches"] and len(parts) == 3 and parts[2] in server.batches:
            with server._lock:
                self._send(200, dict(server.batches[parts[2]]))
        elif parts == ["v1", "messages", "batches"]:  # the list, newest first, in one page
            with server._lock:
                data = sorted((dict(b) for b in server.message_batches.values()), key=lambda b: b["created_at"],
                              reverse=True)
            self._send(200, {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                             "last_id": data[-1]["id"] if data else None})
        elif parts[:3] == ["v1", "messages", "batches"] and len(parts) == 4 and parts[3] in server.message_batches:
            with server._lock:
                self._send(200, dict(server.message_batches[parts[3]]))
        elif parts[:3] == ["v1", "messages", "batches"] and parts[4:] == ["results"] \
                and parts[3] in server.message_results:
            with server._lock:
                failing, server.failed_downloads = server.failed_downloads > 0, max(server.failed_downloads - 1, 0)
            if failing:
                self._send(500, {"type": "error", "error": {"type": "api_error", "message": "injected"}})
            else:
                self._send_bytes(200, server.message_results[parts[3]], "application/binary")
        elif parts[:2] == ["v1", "files"] and len(parts) == 4 and parts[3] == "content" and parts[2] in server.files:
            with server._lock:
                failing, server.failed_downloads = server.failed_downloads > 0, max(server.failed_downloads - 1, 0)
            if failing:
                self._send(500, {"error": {"message": "injected", "type": "server_error"}})
            else:
                self._send_bytes(200, server.files[parts[2]], "application/octet-stream")
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        path = self.path.rstrip("/")
        if path not in ("/v1/chat/completions", "/v1/files", "/v1/batches", "/v1/messages", "/v1/messages/batches"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        if self._refused():
            return
        if path == "/v1/files":
            self._send(200, self._upload(body))
            return
        if path == "/v1/batches":
            self._send(200, self.server.new_batch(json.loads(body)))
            return
        if path == "/v1/messages/batches":
            self._send(200, self.server.new_message_batch(json.loads(body)))
            return
        try:
            request = json.loads(body)
        except json.JSONDecodeError as exc:
            self._send(400, {"error": {"message": f"invalid JSON body: {exc}", "type": "invalid_request_error"}})
            return
        self._send(200, self.server.message(request) if path == "/v1/messages" else self.server.reply(request))

    def _upload(self, body: bytes) -> dict[str, Any]:
        """A multipart upload (``POST /v1/files``) kept in memory, as the Files API describes it."""
        from email.parser import BytesParser
        from email.policy import default

        form = BytesParser(policy=default).parsebytes(
            f"Content-Type: {self.headers.get('Content-Type')}\r\n\r\n".encode() + body)
        fields = {part.get_param("name", header="content-disposition"): part for part in form.iter_parts()}
        data = fields["file"].get_payload(decode=True)
        fid = f"file-{uuid.uuid4().hex[:24]}"
        with self.server._lock:
            self.server.files[fid] = data
        return {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": fields["file"].get_filename() or "upload.jsonl", "purpose": "batch", "status": "processed"}

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), "application/json")

    def _send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server signature
        pass  # one line per request would drown the benchmarks' output


def serve(latency_s: float = 0.5, port: int = 0, require_key: str | None = None,
          array_items: int = 0) -> contextlib.AbstractContextManager[LatencyServer]:
    """Run a ``LatencyServer`` on 127.0.0.1 in a daemon thread; yields it (``server.url`` is
    the base URL ending in ``/v1``) and shuts it down on exit."""
    return running(LatencyServer(("127.0.0.1", port), latency_s, require_key, array_items))


@contextlib.contextmanager
def running(server: LatencyServer) -> Iterator[LatencyServer]:
    """Serve ``server`` (this module's or a subclass's) from a daemon thread; yields it and
    shuts it down on exit."""
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="latency-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def config_for(params: str | Path, url: str, cache_path: str | Path, max_concurrency: int = 64,
               conversations_in_flight: int | None = None):
    """A parameter file's RunConfig with every role bound to the server at ``url``.

    Args:
        params: the YAML parameter file.
        url: the server's base URL.
        cache_path: the response cache (give an empty one to make every call reach the server).
        max_concurrency: requests in flight per model.
        conversations_in_flight: overrides ``probing.conversations_in_flight`` when given.
    """
    from pbench import config

    data = config.load(params).dump()  # loaded first, so relative input paths are resolved
    spec = {"provider": "openai", "model": "latency-server", "base_url": url, "max_concurrency": max_concurrency}
    data["models"] = {"generator": spec, "assistant": [spec], "prober": spec, "judge": [spec]}
    data["llm"] = {"cache": True, "cache_path": str(cache_path)}
    if conversations_in_flight is not None:
        data["probing"]["conversations_in_flight"] = conversations_in_flight
    return config.parse(data, source=f"{params} (roles bound to {url})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per request")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--require-key", default=None, help="refuse requests without this bearer key (401)")
    ap.add_argument("--array-items", type=int, default=0, help="items per JSON array beyond the schema's minimum")
    args = ap.parse_args()
    with serve(args.latency, args.port, args.require_key, args.array_items) as server:
        until_interrupted(server)


def until_interrupted(server: LatencyServer) -> None:
    """Say where ``server`` listens, serve until Ctrl-C or SIGTERM, then print its counters."""
    # A script's background job starts with SIGINT ignored, and a script stops it with SIGTERM.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    print(f"serving {server.url}/chat/completions with {server.latency_s} s latency; Ctrl-C stops", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print(f"\n{server.requests} requests answered, {server.rejected} refused, "
              f"at most {server.max_in_flight} in flight", flush=True)


if __name__ == "__main__":
    main()
