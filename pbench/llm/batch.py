"""Calls made together, sent through the OpenAI Batch API (``batch: true`` on an ``openai``
model) or Anthropic's Message Batches (on an ``anthropic`` model): the provider prices them at
half, and answers within 24 hours.

A ``BatchBackend`` stands where the live ``OpenAIBackend`` stood. Each ``generate`` puts its
request into the open round and waits. A round is submitted once no request has joined it for
``window_s`` seconds (the requests a stage gathers at once: one batch; regenerations after
them: the next), or when it holds ``MAX_ITEMS``. A submission is a JSONL file (``/v1/files``,
purpose ``batch``) and a batch over it (``/v1/batches``). Its id and its items' ids are
appended to ``<run>/batches/batches.jsonl`` before any wait, so a run killed while polling
re-attaches when it starts again: a request whose item is in a batch not yet collected waits
for that batch, and nothing is submitted twice. An item's id is the sha256 of its request
body, so the same request has the same id in any process. The uploaded file is logged before
its batch is created: a process killed between the two leaves the upload in the log, and the
next one finds the batch made over it among the provider's (``_adopt``) before it submits.

A finished batch's answers are kept beside the log (``<batch id>.jsonl``) and read through the
live path's ``backends.reply_of`` (``message_reply_of`` for Anthropic): they reach the
response cache under the same keys as live answers would, and a rerun reads them from there. An item the batch failed, expired or
cancelled goes into the next round (``batch_failed: resubmit``, at most ``MAX_ROUNDS`` times)
or is sent live (``live``). Either way it is counted (``stats``), never dropped.

The rounds, the log, re-attaching and the failures are the same for both providers; what
differs is in the methods that ``AnthropicBatchBackend`` overrides: ``_create`` (submit a
round), ``_poll`` (a batch's status and counts), ``_collect`` (its answers), ``_read`` (an
answer as a ``RawReply``) and ``_key`` (a request's item id). Anthropic takes a batch's
requests inline, with no file: there is no upload to log, and nothing to adopt (see
``AnthropicBatchBackend`` for the gap that leaves).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pbench import store
from pbench.llm.backends import AnthropicBackend, OpenAIBackend, message_reply_of, reply_of
from pbench.llm.errors import TransientError
from pbench.llm.replies import Message, RawReply

WINDOW_S = 2.0  # seconds without a new request that close a round
MAX_ITEMS = 50_000  # the Batch API's limit of requests per batch
MAX_ROUNDS = 3  # submissions of one item before it goes live
CLOCK_SKEW_S = 3600.0  # how far the provider's clock may be behind ours, when looking for a batch by its file
DONE = ("completed", "failed", "expired", "cancelled")  # a batch's final states
ENDPOINT: Literal["/v1/chat/completions"] = "/v1/chat/completions"


def item_id(body: dict[str, Any]) -> str:
    """A request's id in a batch: the sha256 of its body (the same request, the same id)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


class Polled(NamedTuple):
    """A batch's state as one poll read it."""

    status: str  # the provider's word for it
    done: bool  # processing has ended: its answers can be collected
    completed: int  # items answered so far (for the bar)
    failed: int  # items failed so far (for the bar)
    batch: Any  # the provider's batch object, for ``_collect``


class BatchBackend:
    """The Batch API behind the ``Backend`` interface (see the module).

    This class speaks OpenAI's Batch API; ``AnthropicBatchBackend`` overrides its provider's part.

    Args:
        live: the model's live backend: its request bodies, its client, and the calls sent live.
        folder: where the batches' log and answers are kept (the run's ``batches/``).
        poll_s: seconds between polls of a batch's status.
        failed: ``resubmit`` or ``live``: what becomes of an item a batch did not answer.
        window_s: seconds without a new request after which the open round is submitted
            (default ``WINDOW_S``).
        progress: show a bar per batch while it is waited on (completed, failed, total, status).
    """

    waits = True  # a batch answers within hours: ChatModel does not hold it to timeout_s

    def __init__(self, live: OpenAIBackend | AnthropicBackend, folder: str | Path, poll_s: float = 30.0,
                 failed: str = "resubmit", window_s: float | None = None, progress: bool = True) -> None:
        self.live, self.identity = live, live.identity
        self._sdk: Any = live._client  # the provider's client, which only the provider's part calls
        self.folder, self.log = Path(folder), Path(folder) / "batches.jsonl"
        self.poll_s, self.failed, self.progress = poll_s, failed, progress
        self.window_s = WINDOW_S if window_s is None else window_s
        self.stats: Counter[str] = Counter()
        self._waiters: dict[str, list[asyncio.Future]] = {}
        self._bodies: dict[str, tuple[dict[str, Any], bool]] = {}
        self._open: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._rounds: Counter[str] = Counter()
        self._tasks: set[asyncio.Task] = set()
        self._watched: set[str] = set()
        self._answers: dict[str, dict[str, Any]] = {}  # item id -> response body, of collected batches
        self._pending: dict[str, list[str]] = {}  # batch id -> its items, submitted and not collected
        # file id -> (its items, when uploaded): uploaded, and no batch logged over it. A kill
        # between the batch's creation and its log line leaves one; ``_adopt`` asks the provider.
        self._uploads: dict[str, tuple[list[str], float]] = {}
        self._adopting: asyncio.Task | None = None
        for entry in store.read_jsonl(self.log) if self.log.is_file() else []:
            if "batch" not in entry:  # an upload, or one settled by _adopt
                if entry.get("settled"):
                    self._uploads.pop(entry["file"], None)
                else:
                    self._uploads[entry["file"]] = (entry["items"], entry["at"])
            elif entry.get("collected"):
                self._pending.pop(entry["batch"], None)
                self._answers.update(self._kept(entry["batch"]))
            else:
                self._uploads.pop(entry.get("file", ""), None)
                self._pending[entry["batch"]] = entry["items"]

    async def generate(self, messages: Sequence[Message], *, schema: dict[str, Any] | None,
                       settings: dict[str, Any]) -> RawReply:
        body = self.live.request(messages, schema, settings)
        key, with_top = self._key(body, settings), bool(settings.get("top_logprobs"))
        if key in self._answers:  # a batch of an earlier process answered it
            self.stats["answered_before"] += 1
            return self._read(self._answers[key], with_top)
        if self._uploads:
            await self._adopt()
        future = asyncio.get_running_loop().create_future()
        if key in self._waiters:  # the same request twice at once: one item
            self._waiters[key].append(future)
            return await future
        self._waiters[key], self._bodies[key] = [future], (body, with_top)
        submitted = next((b for b, items in self._pending.items() if key in items), None)
        if submitted is not None:  # killed while it waited: wait for the batch it is in
            self.stats["reattached"] += 1
            self._watch(submitted, self._pending[submitted])
        else:
            self._join(key)
        return await future

    # ------------------------------------------------------------------ rounds

    def _join(self, key: str) -> None:
        self._open.append(key)
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        if len(self._open) >= MAX_ITEMS:
            self._spawn(self._submit())
        else:
            self._timer = loop.call_later(self.window_s, lambda: self._spawn(self._submit()))

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _submit(self) -> None:
        keys, self._open, self._timer = self._open, [], None
        if not keys:
            return
        try:
            entry = await self._create(keys)
        except Exception as exc:  # the round is not submitted: each request fails, and ChatModel retries it
            for k in keys:
                self._fail(k, TransientError(f"batch submission failed ({type(exc).__name__}: {exc})"))
            return
        store.append_jsonl(self.log, [{**entry, "items": keys, "at": time.time()}])
        self.stats["batches"] += 1
        self.stats["submitted"] += len(keys)
        self._pending[entry["batch"]] = keys
        self._watch(entry["batch"], keys)

    # ------------------------------------------------------------------ the provider's part

    def _key(self, body: dict[str, Any], settings: dict[str, Any]) -> str:
        """A request's item id (``item_id`` of its body)."""
        return item_id(body)

    def _read(self, body: dict[str, Any], with_top: bool) -> RawReply:
        """An answer kept from a batch, read as the live path reads one."""
        return reply_of(body, with_top)

    async def _create(self, keys: list[str]) -> dict[str, Any]:
        """Submit one round; returns its log line's own fields (``batch``, its id, and ``file``)."""
        lines = "".join(json.dumps({"custom_id": k, "method": "POST", "url": ENDPOINT, "body": self._bodies[k][0]}) + "\n"
                        for k in keys)
        client = self._sdk
        uploaded = await client.files.create(file=("pbench-batch.jsonl", lines.encode()), purpose="batch")
        # Logged before the batch exists: a kill after its creation and before its own log
        # line leaves this one, and the next process finds the batch by its input file.
        store.append_jsonl(self.log, [{"file": uploaded.id, "items": keys, "at": time.time()}])
        batch = await client.batches.create(input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h")
        return {"batch": batch.id, "file": uploaded.id}

    async def _poll(self, batch_id: str) -> Polled:
        """One look at a batch (raises as the client does; the caller polls again)."""
        batch = await self._sdk.batches.retrieve(batch_id)
        counts = batch.request_counts
        return Polled(str(batch.status), batch.status in DONE, counts.completed if counts else 0,
                      counts.failed if counts else 0, batch)

    async def _collect(self, polled: Polled) -> tuple[dict[str, dict[str, Any]], dict[str, str], str]:
        """An ended batch's answers (item id -> response body), why items were not answered
        where the provider says so per item (item id -> reason), and the status to log and
        count the others under."""
        answered: dict[str, dict[str, Any]] = {}
        text, status, output = "", polled.status, polled.batch.output_file_id
        if output:
            got = await self._download(lambda: self._sdk.files.content(str(output)))
            text, status = ("", "unread") if got is None else (got.text, status)
        for line in text.splitlines():
            if line.strip():
                record = json.loads(line)
                response = record.get("response") or {}
                if response.get("status_code") == 200 and isinstance(response.get("body"), dict):
                    answered[record["custom_id"]] = response["body"]
        return answered, {}, status

    async def _adopt(self) -> None:
        """Uploads an earlier process logged with no batch after them: a batch the provider
        holds over one is waited on as if logged (``adopted``); an upload no batch was made of
        is settled, and its items are asked again. Once per process, before any request; a
        failed lookup fails the requests waiting on it (ChatModel retries them, and so the lookup)."""
        if self._adopting is None:
            self._adopting = asyncio.get_running_loop().create_task(self._find_uploads())
        adopting = self._adopting
        try:
            await asyncio.shield(adopting)
        except Exception as exc:
            if self._adopting is adopting:
                self._adopting = None
            raise TransientError(f"could not list the provider's batches ({type(exc).__name__}: {exc})") from exc

    async def _find_uploads(self) -> None:
        since = min(at for _, at in self._uploads.values()) - CLOCK_SKEW_S  # the list runs newest first
        found: dict[str, str] = {}
        async for b in self._sdk.batches.list(limit=100):
            if b.input_file_id in self._uploads:
                found[b.input_file_id] = b.id
            if b.created_at < since or len(found) == len(self._uploads):
                break
        for file_id, (items, at) in list(self._uploads.items()):
            entry: dict[str, Any] = {"file": file_id, "settled": True}
            if file_id in found:
                entry = {"batch": found[file_id], "file": file_id, "items": items, "at": at, "adopted": True}
                self._pending[found[file_id]] = items
                self.stats["adopted"] += 1
            store.append_jsonl(self.log, [entry])
            del self._uploads[file_id]

    def _watch(self, batch_id: str, keys: list[str]) -> None:
        if batch_id not in self._watched:
            self._watched.add(batch_id)
            self._spawn(self._wait(batch_id, keys))

    async def _download(self, fetch: Callable[[], Awaitable[Any]]) -> Any:
        """``fetch()``, a batch's answers, tried ``MAX_ROUNDS`` times, each failure counted;
        None when the last fails too (its items are then unanswered, not lost)."""
        for attempt in range(MAX_ROUNDS):
            try:
                return await fetch()
            except Exception:
                self.stats["download_errors"] += 1
                if attempt < MAX_ROUNDS - 1:
                    await asyncio.sleep(self.poll_s)
        return None

    async def _wait(self, batch_id: str, keys: list[str]) -> None:
        """Poll the batch until it ends, then answer, resubmit or send live each of its items."""
        from tqdm import tqdm

        with tqdm(total=len(keys), desc=f"batch {batch_id[-8:]}", unit="call", leave=False,
                  disable=None if self.progress else True) as bar:
            while True:
                try:
                    polled = await self._poll(batch_id)
                except Exception:  # a failed poll is polled again; the batch goes on at the provider's
                    self.stats["poll_errors"] += 1
                    await asyncio.sleep(self.poll_s)
                    continue
                bar.n = polled.completed
                bar.set_postfix(failed=polled.failed, status=polled.status, refresh=False)
                bar.refresh()
                if polled.done:
                    break
                await asyncio.sleep(self.poll_s)
        answered, reasons, status = await self._collect(polled)
        store.write_jsonl(self.folder / f"{batch_id}.jsonl", [{"custom_id": k, "body": b} for k, b in answered.items()])
        store.append_jsonl(self.log, [{"batch": batch_id, "collected": True, "status": status,
                                       "answered": len(answered), "unanswered": len(set(keys) - set(answered))}])
        self._pending.pop(batch_id, None)
        self._answers.update(answered)
        for k in keys:
            if k not in self._waiters:
                continue  # an item of an earlier process's batch that this one has not asked for (yet)
            if k in answered:
                try:
                    self._resolve(k, self._read(answered[k], self._bodies[k][1]))
                    continue
                except TransientError:
                    pass
            self._unanswered(k, reasons.get(k, status))

    def _unanswered(self, key: str, status: str) -> None:
        """An item its batch did not answer: into the next round, or live."""
        self.stats[f"unanswered_{status}"] += 1
        self._rounds[key] += 1
        if self.failed == "resubmit" and self._rounds[key] < MAX_ROUNDS:
            self.stats["resubmitted"] += 1
            self._join(key)
        else:
            self.stats["sent_live"] += 1
            self._spawn(self._live(key))

    async def _live(self, key: str) -> None:
        body, with_top = self._bodies[key]
        try:
            self._resolve(key, await self.live.send(body, with_top))
        except Exception as exc:  # ChatModel retries a transient failure, or gives up and counts it
            self._fail(key, exc)

    def _resolve(self, key: str, reply: RawReply) -> None:
        for future in self._waiters.pop(key, []):
            if not future.done():
                future.set_result(reply)

    def _fail(self, key: str, exc: BaseException) -> None:
        for future in self._waiters.pop(key, []):
            if not future.done():
                future.set_exception(exc)

    def _kept(self, batch_id: str) -> dict[str, dict[str, Any]]:
        path = self.folder / f"{batch_id}.jsonl"
        return {r["custom_id"]: r["body"] for r in store.read_jsonl(path)} if path.is_file() else {}


class AnthropicBatchBackend(BatchBackend):
    """Anthropic's Message Batches behind the same rounds, log and failure handling.

    A round is one ``messages.batches.create`` with its requests inline (``custom_id``: the
    item id, 32 hex characters of the 64 allowed; ``params``: the live request body), logged as
    soon as it returns. There is no upload before it, so no upload to adopt. What is left is the
    moment between the provider creating the batch and this process appending its line: a kill
    there, or a reply lost on the way back, leaves a batch the log does not know, and its items
    are submitted again (paid twice, answered once). It cannot be found afterwards: the provider's
    list of batches (``messages.batches.list``) gives each batch's counts and times, not its
    requests' custom ids, so it cannot be told from any other batch of the workspace.

    A parse retry asks again with another seed, which Anthropic's request does not carry: the
    item id is the body's and the seed's, so the retry is a new item, not the answer it replaces.
    """

    def _key(self, body: dict[str, Any], settings: dict[str, Any]) -> str:
        return item_id({"params": body, "seed": settings.get("seed"), "attempt": settings.get("attempt")})

    def _read(self, body: dict[str, Any], with_top: bool) -> RawReply:
        return message_reply_of(body)

    async def _create(self, keys: list[str]) -> dict[str, Any]:
        batch = await self._sdk.messages.batches.create(
            requests=[{"custom_id": k, "params": self._bodies[k][0]} for k in keys])
        return {"batch": batch.id}

    async def _poll(self, batch_id: str) -> Polled:
        batch = await self._sdk.messages.batches.retrieve(batch_id)
        counts = batch.request_counts
        status = "canceled" if batch.cancel_initiated_at is not None else str(batch.processing_status)
        return Polled(status, batch.processing_status == "ended", counts.succeeded,
                      counts.errored + counts.canceled + counts.expired, batch)

    async def _collect(self, polled: Polled) -> tuple[dict[str, dict[str, Any]], dict[str, str], str]:
        """Each result's message, or its type (``errored``, ``canceled``, ``expired``) as the reason."""
        async def fetch() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
            answered: dict[str, dict[str, Any]] = {}
            reasons: dict[str, str] = {}
            async for entry in await self._sdk.messages.batches.results(polled.batch.id):
                if entry.result.type == "succeeded":
                    answered[entry.custom_id] = entry.result.message.model_dump()
                else:
                    reasons[entry.custom_id] = str(entry.result.type)
            return answered, reasons

        got = await self._download(fetch)
        return ({}, {}, "unread") if got is None else (*got, polled.status)
