"""Stage 02's run: every user's footprint generated (or resumed), each telling checked for its
secret and regenerated a bounded number of times, then the files written.

Reads ``community.json`` (stage 01) through the caller's view. Writes
``footprint/users/<id>.json`` as each user finishes (a killed run loses only the users in
flight; a rerun skips finished users), then ``documents.jsonl``, ``secrets.jsonl``,
``footprint.json`` and ``DATASHEET.md``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pbench import store
from pbench.config import RunConfig
from pbench.footprint.generator import FootprintGenerator, UserResult
from pbench.footprint.presence import THRESHOLD_FLOOR, THRESHOLD_SAMPLE, PresenceChecker, negative_quantile, spans
from pbench.footprint.report import datasheet, stage_report
from pbench.llm import LLMError, flush_caches, run_sync
from pbench.schema import Document, Secret
from pbench.social_graph import CommunityView
from pbench.tellings import told_between


def _user_file(run_dir: Path, uid: str) -> Path:
    return run_dir / "footprint" / "users" / f"{uid}.json"


def _save_user(run_dir: Path, uid: str, res: UserResult) -> None:
    store.write_json(_user_file(run_dir, uid), {
        "documents": [d.model_dump(mode="json") for d in res.documents],
        "secrets": [s.model_dump(mode="json") for s in res.secrets],
        "notes": res.notes, "unplaced": res.unplaced,
    })


def _load_user(run_dir: Path, uid: str) -> UserResult:
    data = store.read_json(_user_file(run_dir, uid))
    return UserResult([Document.model_validate(d) for d in data["documents"]],
                      [Secret.model_validate(s) for s in data["secrets"]], data["notes"], data["unplaced"])


def build(cfg: RunConfig, view: CommunityView, model: Any, run_dir: str | Path, progress: Any = None,
          embed: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, Any]:
    """Generate (or resume) every user's footprint, validate the secrets, write the files.

    Args:
        cfg: the run's parameters.
        view: the community from stage 01.
        model: the ``generator`` ChatModel.
        run_dir: the run folder.
        progress: optional tqdm bar, ticked per model request.
        embed: texts to unit vectors (default: all-MiniLM-L6-v2); tests pass their own.
    Returns:
        The stage report (also written to ``footprint.json``).
    """
    run_dir = Path(run_dir)
    if embed is None:
        from pbench import embeddings

        embed = embeddings.embed
    gen = FootprintGenerator(cfg, view, model, progress)
    users = sorted(view.people)
    resumed = [u for u in users if _user_file(run_dir, u).is_file()]
    if progress is not None:
        progress.total = sum(gen.estimate_requests(u) for u in users if u not in resumed)
        progress.refresh()
    run_sync(_generate(gen, [u for u in users if u not in resumed], run_dir))
    results = {u: _load_user(run_dir, u) for u in users}
    validation = run_sync(_validate(gen, results, embed))
    for uid, res in results.items():
        _save_user(run_dir, uid, res)
    documents = [d for u in users for d in results[u].documents]
    secrets = [s for u in users for s in results[u].secrets]
    store.write_jsonl(run_dir / "documents.jsonl", [d.model_dump(mode="json") for d in documents])
    store.write_jsonl(run_dir / "secrets.jsonl", [s.model_dump(mode="json") for s in secrets])
    report = stage_report(view, results, documents, secrets, resumed, validation)
    store.write_json(run_dir / "footprint.json", report)
    store.atomic_write_text(run_dir / "DATASHEET.md", datasheet(cfg, report))
    return report


async def _generate(gen: FootprintGenerator, todo: list[str], run_dir: Path) -> None:
    """Write the users in ``todo``, each saved whole as it finishes.

    Raises:
        LLMError: some users gave up (the others are saved; their replies and the failed
            users' partial replies are cached).
    """
    model = gen.model
    # Few users in flight, each with several requests, so that users finish (and land) one
    # after another: a killed run loses only the users in flight (their replies stay cached).
    in_flight = asyncio.Semaphore(max(1, getattr(model, "concurrency", 2) // 2))

    async def one(uid: str) -> None:
        async with in_flight:
            result = await gen.user(uid)
            await asyncio.to_thread(flush_caches, [model])  # its replies committed before the user lands
            _save_user(run_dir, uid, result)  # each user lands whole, or not at all

    outcomes = await asyncio.gather(*(one(u) for u in todo), return_exceptions=True)
    failed = {u: o for u, o in zip(todo, outcomes, strict=True) if isinstance(o, BaseException)}
    for o in failed.values():
        if not isinstance(o, LLMError):
            raise o
    if failed:
        first = next(iter(failed.values()))
        raise LLMError(f"{len(failed)} of {len(todo)} users gave up ({', '.join(failed)}; first: {first}); "
                       "finished users are saved, rerun the stage to retry the rest")


async def _validate(gen: FootprintGenerator, results: dict[str, UserResult], embed: Callable) -> dict[str, Any]:
    """Label every sharing event; regenerate missing ones up to ``footprint.share_retries`` times."""
    components = [c for r in results.values() for s in r.secrets for c in s.core_components]
    # Negatives: each user's mundane text can carry no other user's secret.
    unrelated = [p for r in results.values() for d in r.documents if not d.secret_ids for p in spans(d.text)]
    loop = asyncio.get_running_loop()
    # An even spread over every user's sentences (the first 4,000 were all one user's at paper
    # scale, and embedding them cost 52 s whatever the run): all of them in a small run.
    sample = unrelated[:: max(1, -(-len(unrelated) // THRESHOLD_SAMPLE))]
    q99 = await loop.run_in_executor(None, negative_quantile, components, sample, embed)
    threshold = max(THRESHOLD_FLOOR, q99)
    checker = PresenceChecker(threshold, embed)
    regenerated = 0
    for res in results.values():
        docs = {d.id: d for d in res.documents}
        for i, secret in enumerate(res.secrets):
            events = []
            for e in secret.sharing:
                owner = gen.view.name(secret.owner)
                label = checker.label(secret.core_components, docs[e.document_id].text, owner)
                attempt = 0
                # A telling must carry the secret and, in a chat, be an exchange between its people.
                while (label == "missing" or not told_between(docs[e.document_id], gen.view)) \
                        and attempt < gen.cfg.footprint.share_retries:
                    attempt += 1
                    regenerated += 1
                    docs[e.document_id] = await gen.share_document(secret, e, attempt)
                    label = checker.label(secret.core_components, docs[e.document_id].text, owner)
                events.append(e.model_copy(update={"presence": label}))
            res.secrets[i] = secret.model_copy(update={"sharing": events})
        res.documents = sorted(docs.values(), key=lambda d: d.timestamp)
    labels = Counter(e.presence for r in results.values() for s in r.secrets for e in s.sharing)
    return {"threshold": round(threshold, 3), "negative_q99": round(q99, 3), "verbatim": labels["verbatim"], "semantic": labels["semantic"],
            "missing": labels["missing"], "regenerated": regenerated}
