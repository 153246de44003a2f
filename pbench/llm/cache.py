"""The response cache: replies kept in SQLite under a hash of everything that determines them
(``cache_key``), so rerunning the same work makes no calls.

The key is the contract with every cache already on disk: change what goes into it and every
reply is asked for again (``tests/test_llm.py`` pins known keys).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pbench.llm.replies import Message, RawReply


class ResponseCache:
    """Persistent replies keyed by a hash of everything that determines them.

    Reads are a primary-key lookup on the caller's thread. Writes never wait for the disk:
    ``put`` hands the reply to a writer thread that commits whatever has arrived in one
    transaction, at most ``flush_s`` after the first of them, on its own connection (SQLite's
    write-ahead log lets readers go on meanwhile). Until then ``get`` finds the reply among
    the pending ones. A killed process loses at most the last ``flush_s`` of replies, which
    a rerun asks for again; ``flush``, ``close`` and the interpreter's exit commit the rest.
    """

    def __init__(self, path: str | Path, flush_s: float = 0.2) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush_s = flush_s
        self._lock = threading.Lock()  # the reading connection
        self._db = self._connect()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT NOT NULL, created REAL)")
        self._pending: dict[str, tuple[str, float]] = {}
        self._changed = threading.Condition()  # guards _pending, _writing and _closed
        self._writing = 0  # replies taken from _pending whose commit has not finished
        self._flush_now = self._closed = False
        self._writer = threading.Thread(target=self._write_loop, name="pbench-cache", daemon=True)
        self._writer.start()
        atexit.register(self.close)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)

    def get(self, key: str) -> RawReply | None:
        with self._changed:
            pending = self._pending.get(key)
        if pending is not None:
            return _reply_of(pending[0])
        with self._lock:
            row = self._db.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return _reply_of(row[0]) if row else None

    def put(self, key: str, reply: RawReply) -> None:
        if reply.injected:
            raise ValueError("an injected fault is not the model's answer: it is never cached")
        record = {"text": reply.text, "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
        if reply.top is not None:  # only replies that carry them: older records stay byte for byte
            record["top"] = [list(t) for t in reply.top]
        with self._changed:
            if self._closed:
                raise ValueError(f"{self.path}: the response cache is closed")
            self._pending[key] = (json.dumps(record), time.time())
            self._changed.notify_all()  # wakes the writer if it was idle

    def _write_loop(self) -> None:
        db = self._connect()
        try:
            while True:
                with self._changed:
                    self._changed.wait_for(lambda: self._pending or self._closed)
                    if not self._pending:  # closed, nothing left
                        return
                    deadline = time.monotonic() + self.flush_s  # let a batch gather
                    while not (self._closed or self._flush_now) and (left := deadline - time.monotonic()) > 0:
                        self._changed.wait(left)
                    self._flush_now = False
                    batch = list(self._pending.items())
                    self._writing = len(batch)
                db.execute("BEGIN")
                db.executemany("INSERT OR REPLACE INTO replies VALUES (?, ?, ?)",
                               [(k, text, created) for k, (text, created) in batch])
                db.execute("COMMIT")
                with self._changed:
                    for k, value in batch:  # a newer put of the same key stays pending
                        if self._pending.get(k) is value:
                            del self._pending[k]
                    self._writing = 0
                    self._changed.notify_all()
        finally:
            db.close()

    def flush(self) -> None:
        """Wait until every reply put so far is committed."""
        with self._changed:
            self._flush_now = True
            self._changed.notify_all()
            self._changed.wait_for(lambda: not self._pending and not self._writing or not self._writer.is_alive())

    def __len__(self) -> int:
        self.flush()
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        """Commit what is pending, stop the writer and close the file (idempotent)."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
        self._writer.join()
        with self._lock:
            self._db.close()
        atexit.unregister(self.close)


def _reply_of(record: str) -> RawReply:
    d = json.loads(record)
    if d.get("top") is not None:
        d["top"] = tuple((str(t), float(lp)) for t, lp in d["top"])
    return RawReply(**d)


def flush_caches(models: Iterable[Any]) -> None:
    """Commit what the models' response caches hold pending. Call it before writing a record
    made from their replies: after a kill, a record never outlives the replies it came from,
    so a rerun (or a reproduction from the cache) finds every one of them."""
    seen: set[int] = set()
    for model in models:
        cache = getattr(model, "cache", None)
        if cache is not None and id(cache) not in seen:
            seen.add(id(cache))
            cache.flush()


def cache_key(identity: dict[str, Any], messages: Sequence[Message], settings: dict[str, Any]) -> str:
    """The key of a request: a hash of the model's identity, the messages and the settings
    (seed, attempt and schema among them). Existing caches hold these keys: keep it as it is."""
    blob = json.dumps({"model": identity, "messages": list(messages), "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()
