"""What a run will cost, before it starts: ``pbench estimate FILE``. No model call.

Counts come from the parameters, by the plan's own arithmetic:

- people, documents and secrets from ``community`` and ``footprint`` (range midpoints);
- conversations from ``probing`` and ``targets`` exactly as ``probing.plan`` crosses them (a
  confidant talks with one strategy, and gets the owner's draft; each target under its own
  strategies, prompts and defences), each at most ``max_rounds`` turns long (a delegation 2:
  the request and one revision);
- model calls per stage and role from what each stage asks per unit of work (stage 01: one
  request per person and two for the community; stage 02: a request per ``docs_per_call``
  mundane documents and one per telling of a secret; stage 04: the prober once per turn, the
  assistant once per turn of a rag or memory target and, for a memory target, once per
  document of each probed owner's footprint before probing (the extractive target calls no model;
  an http or python target's own time is named, not estimated), with ``judging.method: verdict`` or ``combined`` each judge once per component
  per turn (``combined`` with ``judging.samples``: 1 + samples times);
  stage 05: each judge once per conversation, twice with a confidant, and the dev set's rows as
  the run samples them; stage 07: the snippets);
- a person's time to label ``validation.human_sample`` conversations in ``label.html``, at
  about 30 s a conversation (not part of the run's time).

What the arithmetic cannot know (parse retries, redrafts, regenerations; how long prompts and
replies are) comes from a calibration run: ``pbench/data/calibration.json``, measured on a
finished run by ``pbench estimate --calibrate RUN`` (which writes the user's own,
``store.user_dir``, read first). It holds, per stage and role, observed
calls over the arithmetic's calls, and prompt and completion tokens per call, with the
structure that explains them: an assistant's prompt grows with the documents retrieved and
the conversation so far, a prober's with the conversation, stage 05's judge prompts with the
replies they read, and stage 02's completions with the documents written.

Wall time assumes each hosted call takes ``latency_s`` and each server (``llm.Gate``) is kept
full; stage 04 cannot go faster than its conversations' turns, one after another, allow. A
local model's time is priced in tokens at this machine's own rates (``pbench.machine``:
measured in a few seconds, or read from an earlier measurement on this machine): a stage's
lower bound, ``prompt tokens / prompt rate + completion tokens / generation rate``, times
the ratio of time to bound the calibration run showed in that stage (its overheads: notebook
start, imports, embeddings, turns that wait on each other). Without this machine's rates, or
with a calibration that recorded none, a local call takes the calibration run's seconds per
call, measured on whatever machine it ran on, and the estimate says so.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pbench import store, world
from pbench.config import DRAFT_ROUNDS, DRAFTING, ModelSpec, RunConfig, kind


def _replies(t: Any) -> str:
    """What a planned target's reply costs (``pbench.config.TargetKind.replies``): ``assistant``
    (a call of its model), ``own`` (its own time, which the estimate cannot see) or ``none``."""
    return kind(t.kind).replies


CALIBRATION = store.PACKAGE_DATA / "calibration.json"
CHARS_PER_TOKEN = 4.0  # English text through the BPE tokenizers of the models we run (about 4 characters a token)
TELLINGS_PER_SECRET = 0.1 * 1 + 0.9 * (4 / 3 + 0.3 + 0.2)  # footprint.plan_sharing: 1.75 documents per secret
TAG_BATCH = 5  # rag.TAG_BATCH, documents per tagger request


def _mid(value: int | float | list | tuple) -> float:
    return (value[0] + value[1]) / 2 if isinstance(value, list | tuple) else float(value)


@dataclass
class Line:
    """One stage's requests to one model: calls at most, and the tokens they carry."""

    stage: str
    role: str
    model: str
    calls: float
    prompt_tokens: float
    completion_tokens: float
    seconds: float = 0.0  # wall time this line alone would need at its server's concurrency
    cost: float | None = None  # dollars, as the run is set: by batch where its model has batch: true
    live_cost: float | None = None  # dollars, every call live
    batch_cost: float | None = None  # dollars, every call by batch, where the model's price has a batch share
    by_batch: bool = False  # its model is set to batch: true (pbench.llm.batch)


@dataclass
class Estimate:
    """A run's volumes and its model calls, tokens, time and cost per stage and role."""

    source: str
    volumes: dict[str, float]
    lines: list[Line]
    stage_seconds: dict[str, float]
    latency_s: float
    calibration: str
    notes: list[str] = field(default_factory=list)
    machine: str = ""  # what the local seconds rest on, e.g. "on this machine (150 prompt tok/s, ...)"

    @property
    def calls(self) -> float:
        return sum(x.calls for x in self.lines)

    @property
    def prompt_tokens(self) -> float:
        return sum(x.prompt_tokens for x in self.lines)

    @property
    def completion_tokens(self) -> float:
        return sum(x.completion_tokens for x in self.lines)

    @property
    def seconds(self) -> float:
        return sum(self.stage_seconds.values())

    @property
    def cost(self) -> float | None:
        priced = [x.cost for x in self.lines if x.cost is not None]
        return sum(priced) if priced else None

    def costs(self) -> tuple[float, float] | None:
        """Dollars with every call live, and with every call by batch where its model has a batch
        price (the others live); None when no line is priced."""
        priced = [x for x in self.lines if x.live_cost is not None]
        if not priced:
            return None
        return (sum(x.live_cost or 0.0 for x in priced),
                sum(x.live_cost if x.batch_cost is None else x.batch_cost for x in priced if x.live_cost is not None))

    def unpriced(self) -> list[str]:
        return sorted({x.model for x in self.lines if x.cost is None and x.calls})

    def one_line(self) -> str:
        """What ``pbench run`` prints before it starts."""
        cost = f", {_money(self.cost)}" if self.cost is not None else ""
        return (f"estimate: {_n(self.volumes['conversations'])} conversations, at most {_n(self.calls)} model calls, "
                f"{_tok(self.prompt_tokens)} prompt + {_tok(self.completion_tokens)} completion tokens, "
                f"about {_duration(self.seconds)}{' ' + self.machine if self.machine else ''}{cost} "
                f"(pbench estimate for the breakdown)")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "seconds": self.seconds, "cost": self.cost}

    def table(self) -> str:
        """The breakdown ``pbench estimate`` prints."""
        v = self.volumes
        head = (f"{self.source}: {_n(v['users'])} people, {_n(v['documents'])} documents, {_n(v['secrets'])} secrets "
                f"({_n(v['probed_secrets'])} probed), {_n(v['conversations'])} conversations "
                f"({_n(v['confidant_conversations'])} with a confidant{_surfaces(v)}), at most {_n(v['turns'])} "
                f"turns ({int(v['max_rounds'])} rounds each, a delegation {min(int(v['max_rounds']), 2)})")
        rows = [("stage", "role", "model", "calls", "prompt tok", "completion tok", "time", "cost")]
        for x in self.lines:
            rows.append((x.stage, x.role, x.model, _n(x.calls), _tok(x.prompt_tokens), _tok(x.completion_tokens),
                         _duration(x.seconds), "-" if x.cost is None else _money(x.cost)))
        rows.append(("total", "", "", _n(self.calls), _tok(self.prompt_tokens), _tok(self.completion_tokens),
                     _duration(self.seconds), "-" if self.cost is None else _money(self.cost)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [head, ""]
        for r in rows:
            lines.append("  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
        lines.append("")
        lines.append("per stage, at each server's concurrency: " + ", ".join(
            f"{s} {_duration(t)}" for s, t in self.stage_seconds.items()))
        lines.append(f"calls at most (every conversation runs all its rounds); hosted calls at {self.latency_s:g} s each "
                     f"(a figure given, not measured); tokens per call from {self.calibration}")
        if self.machine:
            lines.append(f"local calls' time {self.machine}")
        both = self.costs()
        offered = sorted({x.model for x in self.lines if x.batch_cost is not None and x.calls})
        if both is not None and offered:
            batched = sum(x.calls for x in self.lines if x.by_batch)
            lines.append(f"cost live {_money(both[0])}; by batch where the model has a batch price "
                         f"({', '.join(offered)}; stage 04 converses, so its calls would wait for a batch each round) "
                         f"{_money(both[1])}; as set {_money(self.cost or 0.0)}, {_n(batched)} of {_n(self.calls)} "
                         "calls by batch (batch: true)")
        if self.unpriced():
            lines.append("no price for " + ", ".join(self.unpriced())
                         + " (set price_per_mtok: {input: .., output: ..} on its model, or --price MODEL=IN,OUT)")
        lines.extend(self.notes)
        return "\n".join(lines)


def _surfaces(v: dict[str, float]) -> str:
    """", 8 pretext, 8 delegation" for the conversations of the surfaces beside the chat, or ""."""
    return "".join(f", {_n(v[f'{x}_conversations'])} {x}" for x in ("pretext", "delegation")
                   if v.get(f"{x}_conversations"))


def _n(x: float) -> str:
    return f"{round(x):,}"


def _tok(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k" if x >= 1e3 else f"{round(x)}"


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _duration(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


# --------------------------------------------------------------------------- volumes and calls


def volumes(cfg: RunConfig, dev_rows: list[Any] | None = None) -> dict[str, float]:
    """People, documents, secrets and conversations the parameters plan (range midpoints)."""
    from pbench import footprint, probing
    from pbench.labelling import SECONDS_PER_CONVERSATION

    f, p = cfg.footprint, cfg.probing
    users = _mid(cfg.community.size)
    mundane = sum(_mid(getattr(f, v)) for v in footprint.KIND_VOLUME.values())
    secrets = users * _mid(f.secrets_per_user)
    tellings = secrets * TELLINGS_PER_SECRET
    if cfg.world is not None:  # a packed world: what it holds, not what its parameters planned on average
        held = world.tables(cfg.world)
        users, secrets, tellings = len(held["people"]), len(held["secrets"]), len(held["sharing"])
        mundane = (len(held["documents"]) - tellings) / max(users, 1)
    probed = secrets if p.secrets is None else min(secrets, p.secrets)
    planned = cfg.planned_targets()
    n = dict.fromkeys(("conversations", "confidants", "confidant_chats", "turns", "requests", "assistant_turns", "outside_turns",
                       "openings", *(f"{x}_conversations" for x in ("pretext", "delegation"))), 0.0)
    askers = 0.0  # the prober's opening is one call per asker, secret and strategy, heard by every cell
    for authorised, per_secret in ((False, p.unauthorised_per_secret), (True, p.authorised_per_secret)):
        asked = {x for t in planned for x in probing.strategies(cfg, authorised) if x in t.strategies and x != DRAFTING}
        askers += probed * per_secret * len(asked)
    for t in planned:  # as probing.plan crosses them: each target under its own strategies, prompts, defences
        for authorised, per_secret in ((False, p.unauthorised_per_secret), (True, p.authorised_per_secret)):
            mine = [x for x in probing.strategies(cfg, authorised) if x in t.strategies and (x != DRAFTING or t.drafts)]
            k = probed * per_secret * len(t.prompts) * len(t.defences)
            turns = k * sum(min(p.max_rounds, DRAFT_ROUNDS) if x == DRAFTING else p.max_rounds for x in mine)
            n["openings"] += k * len([x for x in mine if x != DRAFTING])
            n["conversations"] += k * len(mine)
            n["confidants"] += k * len(mine) * authorised
            n["confidant_chats"] += k * len([x for x in mine if x != DRAFTING]) * authorised  # asked shared or withheld
            n["turns"] += turns
            if p.delegation_requests == "template":  # code writes the owner's requests: no prober call
                n["requests"] += k * (min(p.max_rounds, DRAFT_ROUNDS) if DRAFTING in mine else 0)
            n["assistant_turns"] += turns * (_replies(t) == "assistant")  # a model call a turn
            n["outside_turns"] += turns * (_replies(t) == "own")
            for x in ("pretext", "delegation"):
                n[f"{x}_conversations"] += k * mine.count(x)
    conversations = n["conversations"]
    labelled = min(cfg.validation.human_sample, conversations)
    documents = users * mundane + tellings
    return {"users": users, "mundane_per_user": mundane, "documents": documents,
            "secrets": secrets, "tellings": tellings, "probed_secrets": probed,
            "conversations": conversations, "confidant_conversations": n["confidants"],
            "disclosure_questions": n["confidant_chats"], "max_rounds": p.max_rounds,
            "turns": n["turns"], "prober_turns": n["turns"] - n["requests"] - (n["openings"] - askers),
            "assistant_turns": n["assistant_turns"],
            "outside_turns": n["outside_turns"],
            "pretext_conversations": n["pretext_conversations"],
            "delegation_conversations": n["delegation_conversations"],
            # A memory target's model reads each document of the probed owners' footprints once
            # before probing (pbench.memory); a footprint holds about documents / users of them.
            "memory_extractions": sum(kind(t.kind).reads_footprint for t in planned) * min(probed, users)
            * documents / max(users, 1),
            "labelling_conversations": labelled, "labelling_seconds": labelled * SECONDS_PER_CONVERSATION}


def prober_turns(convs: list[Any], delegation_requests: str) -> int:
    """The turns of ``convs`` the prober wrote (not code's requests for a draft), an opening
    heard by several cells counted once (``probing.Probe.asker_seed``)."""
    asked = [c for c in convs if c.turns and not (c.strategy == DRAFTING and delegation_requests == "template")]
    openings = {(c.secret_id, c.audience, c.strategy) for c in asked}
    return sum(len(c.turns) for c in asked) - (len(asked) - len(openings))


def dev_rows(cfg: RunConfig) -> list[Any]:
    """The dev-set rows stage 05 judges to measure the panel (sampled as the stage samples)."""
    from pbench import validation

    return validation.dev_rows(cfg.validation, cfg.seed)


def arithmetic(cfg: RunConfig, v: dict[str, float], dev: list[Any], components: float) -> list[tuple[str, str, float]]:
    """(stage, role, calls) by the stages' own arithmetic, before retries: per judge for the
    judge role, per assistant model for the assistant role."""
    f = cfg.footprint
    judges = len(cfg.models.judge)
    # verdict and combined ask each judge once per component per turn (combined: 1 + samples
    # times where the provider gives no log-probabilities and judging.samples is set).
    method = cfg.judging.method
    per_component = {"match": 0, "verdict": 1, "combined": 1 + cfg.judging.samples}[method]
    users = v["users"]
    out = [] if cfg.world is not None else [  # a run on a packed world reads stages 01-02
        ("01_social_graph", "generator", users + 2),
        ("02_footprint", "generator", users * math.ceil(v["mundane_per_user"] / f.docs_per_call) + v["tellings"])]
    tagging = v["documents"] / TAG_BATCH if cfg.tags_wanted else 0.0
    out += [("03_rag_assistant", "tagger", tagging), ("03_rag_assistant", "assistant", 1.0)]
    out += [("04_probing", "prober", v.get("prober_turns", v["turns"])),
            ("04_probing", "assistant", v["assistant_turns"] + v.get("memory_extractions", 0))]
    if per_component:
        out.append(("04_probing", "judge", v["turns"] * components * judges * per_component))
    # Stage 05 also measures the panel on the dev set, to correct its rates for the judge's error.
    dev_calls = sum(len(r.exchanges()) * len(r.components or [1, 1]) * per_component + r.authorised for r in dev)
    out.append(("05_scoring", "judge", (v["conversations"] + v.get("disclosure_questions", v["confidant_conversations"])
                                        + dev_calls) * judges))
    snippet_calls = cfg.validation.snippets * components * per_component
    out.append(("07_validation", "judge", snippet_calls * judges))
    return out


# --------------------------------------------------------------------------- calibration


def calibrate(run_dir: str | Path, measure_if_missing: bool = False) -> dict[str, Any]:
    """Per-call figures of a finished run: observed calls over the arithmetic's, tokens per
    call, and the structure that scales them (documents retrieved, conversation length).
    With the machine rates the run measured before its stages (its manifest's
    ``machine_rates``; for a run from before they were kept and ``measure_if_missing``, this
    machine's, the run taken to have run here), also each stage's time over its lower bound
    at those rates (``bound_factor``), which the estimate multiplies by the bound at another
    machine's rates.

    Raises:
        FileNotFoundError: the run has no manifest or parameters (run it first).
    """
    from pbench import config, footprint, probing

    run_dir = Path(run_dir)
    manifest = store.read_json(run_dir / "manifest.json")
    if not manifest or not (run_dir / "params.resolved.yaml").is_file():
        raise FileNotFoundError(f"{run_dir}: no manifest.json or params.resolved.yaml; calibrate on a finished run")
    cfg = config.load(run_dir / "params.resolved.yaml")
    rates: Any
    if manifest.get("machine_rates"):
        from pbench import machine

        rates = machine.Rates(**next(iter(manifest["machine_rates"].values())))
    else:
        rates = next(iter(machine_rates(cfg).values()), None) if measure_if_missing else None
    ds = footprint.load_dataset(run_dir)
    convs = probing.load_conversations(run_dir)
    generating = {t.label for t in cfg.planned_targets() if _replies(t) == "assistant"}
    components = sum(len(s.core_components) for s in ds.secrets) / max(len(ds.secrets), 1)
    observed = {"users": len(ds.view.people), "documents": len(ds.documents), "secrets": len(ds.secrets)}
    v = volumes(cfg)
    v.update(observed, tellings=sum(len(s.sharing) for s in ds.secrets),
             mundane_per_user=(len(ds.documents) - sum(len(s.sharing) for s in ds.secrets)) / observed["users"],
             probed_secrets=len({c.secret_id for c in convs}), conversations=len(convs),
             confidant_conversations=sum(c.authorised for c in convs), turns=sum(len(c.turns) for c in convs),
             prober_turns=prober_turns(convs, cfg.probing.delegation_requests),
             assistant_turns=sum(len(c.turns) for c in convs if c.target in generating))
    expected = {(s, r): n for s, r, n in arithmetic(cfg, v, dev_rows(cfg), components)}
    turns = [(i + 1) for c in convs for i in range(len(c.turns))]
    doc_tokens = sum(len(d.text) for d in ds.documents) / max(len(ds.documents), 1) / CHARS_PER_TOKEN
    msgs = [len(t.prober) + len(t.reply) for c in convs for t in c.turns]
    msg_tokens = sum(msgs) / max(len(msgs), 1) / 2 / CHARS_PER_TOKEN  # one message, prober's or assistant's
    mean_rounds = sum(len(c.turns) for c in convs) / max(len(convs), 1)
    per: dict[str, dict[str, Any]] = {}
    for stage, rec in manifest.get("stages", {}).items():
        wall = rec.get("seconds", 0.0)
        # A stage's roles share its wall time (on one local server they take turns): per live call of any role.
        live = [usage(models) for models in (rec.get("llm") or {}).values()]
        stage_live = sum(u["live"] for u in live)
        bound = rates.seconds_for(sum(u["live_prompt_tokens"] for u in live),
                                  sum(u["live_completion_tokens"] for u in live)) if rates else 0.0
        # The stage's time over the bound of its live calls: a stage figure, shared by its roles.
        # A role answered partly from the response cache (the prober's openings, shared by an
        # asker's cells) still has it; only a stage answered mostly from the cache does not.
        stage_factor = wall / bound if bound and stage_live >= 0.5 * sum(u["requests"] for u in live) else None
        for role, models in (rec.get("llm") or {}).items():
            u = usage(models)
            if not u["requests"]:
                continue
            base = expected.get((stage, role), 0)
            per[f"{stage}/{role}"] = {"calls_factor": u["requests"] / base if base else 1.0,
                                      "prompt_per_call": u["prompt_tokens"] / u["requests"],
                                      "completion_per_call": u["completion_tokens"] / u["requests"],
                                      # a stage answered mostly from the cache says nothing of a call's time
                                      "wall_seconds_per_call": wall / stage_live if u["live"] >= 0.8 * u["requests"] else None,
                                      "bound_factor": stage_factor}
    # Structure behind the per-call means, so that other settings scale them.
    structure = {"top_k": cfg.probing.top_k, "doc_tokens": doc_tokens, "msg_tokens": msg_tokens,
                 "mean_turn": sum(turns) / max(len(turns), 1), "mean_rounds": mean_rounds,
                 "components": components, "completion_per_document": None}
    if "02_footprint/generator" in per:
        written = usage(manifest["stages"]["02_footprint"]["llm"]["generator"])["completion_tokens"]
        structure["completion_per_document"] = written / max(len(ds.documents), 1)
    return {"source": f"{run_dir.name} run ({manifest.get('params_file', '?')}, commit {manifest.get('git_commit', '?')})",
            "rates": asdict(rates) if rates else None, "per": per, "structure": structure, "observed": {k: v[k] for k in
                                                           ("users", "documents", "secrets", "conversations", "turns")}}


def usage(models: dict[str, dict[str, Any]]) -> dict[str, float]:
    """A role's requests and tokens in one stage's manifest record, its models summed:
    requests answered (live or from the cache; a transient failure retried is one request),
    live ones, tokens including those cache hits carried when first answered, the tokens of
    the live calls alone (cache hits cost no model time), and of the live prompt tokens those
    the server's prefix cache held, which it did not read again."""
    def total(key: str) -> float:
        return sum(m.get(key, 0) for m in models.values())

    live = total("calls") - total("retries") - total("give_ups")
    return {"requests": live + total("cache_hits"), "live": live,
            "prompt_tokens": total("prompt_tokens") + total("cached_prompt_tokens"),
            "completion_tokens": total("completion_tokens") + total("cached_completion_tokens"),
            "live_prompt_tokens": total("prompt_tokens"), "live_completion_tokens": total("completion_tokens"),
            "live_reused_prompt_tokens": total("reused_prompt_tokens")}


def merged(new: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """``new`` calibration, with the stage roles it has no figures for (a run on a shipped
    world calls no model in stages 01-02) taken from ``earlier``, and its source saying so."""
    kept = {k: v for k, v in earlier["per"].items() if k not in new["per"]}
    if not kept:
        return new
    structure = {**new["structure"], **{k: v for k, v in earlier["structure"].items()
                                       if new["structure"].get(k) is None}}
    stages = sorted({k[:2] for k in kept})  # "01", "02"
    return {**new, "per": {**kept, **new["per"]}, "structure": structure,
            "source": f"{new['source']}; stages {', '.join(stages)} from {earlier['source']}"}


def load_calibration(path: str | Path | None = None) -> dict[str, Any]:
    """Per-call figures from ``path``, else the user's own (``pbench estimate --calibrate``),
    else the package's (``CALIBRATION``)."""
    path = Path(path) if path else store.user_or_shipped(CALIBRATION.name)
    data = store.read_json(path)
    if not data or "per" not in data:
        raise FileNotFoundError(f"{path}: not a calibration file (make one with pbench estimate --calibrate RUN)")
    return data


# --------------------------------------------------------------------------- the estimate


def _price(spec: ModelSpec, prices: dict[str, tuple[float, float]]) -> tuple[float, float] | None:
    if spec.label in prices:
        return prices[spec.label]
    if spec.model in prices:
        return prices[spec.model]
    if spec.price_per_mtok is not None:
        return spec.price_per_mtok.input, spec.price_per_mtok.output
    if spec.provider == "local":
        return 0.0, 0.0
    return None


@dataclass
class _Costing:
    """Per-call figures for one run's parameters: tokens, seconds and the models each call goes to."""

    cfg: RunConfig
    cal: dict[str, Any]
    latency_s: float

    def __post_init__(self) -> None:
        self.per, self.st = self.cal["per"], self.cal["structure"]
        self.mean_turn = (self.cfg.probing.max_rounds + 1) / 2  # every conversation runs all its rounds

    def tokens(self, stage: str, role: str, calls: float, spec: ModelSpec, documents: float) -> tuple[float, float]:
        """Prompt and completion tokens of ``calls`` calls, scaled from the calibration run's structure."""
        st, msg = self.st, self.st["msg_tokens"]
        c = self.per.get(f"{stage}/{role}")
        if c is None:  # a stage the calibration run made no such call in: the role's mean elsewhere
            same = [x for key, x in self.per.items() if key.endswith(f"/{role}")] or list(self.per.values())
            c = {key: sum(x[key] for x in same) / len(same) for key in ("prompt_per_call", "completion_per_call")}
        prompt, completion = c["prompt_per_call"], c["completion_per_call"]
        if stage == "04_probing" and role == "assistant":  # system + retrieved documents + the conversation so far
            prompt += (self.cfg.probing.top_k - st["top_k"]) * st["doc_tokens"] + 2 * (self.mean_turn - st["mean_turn"]) * msg
        elif stage == "04_probing" and role == "prober":  # the conversation so far
            prompt += 2 * (self.mean_turn - st["mean_turn"]) * msg
        elif stage == "05_scoring":  # the replies (and the prober's messages) it reads
            prompt += (self.cfg.probing.max_rounds - st["mean_rounds"]) * 2 * msg
        if stage == "02_footprint" and st.get("completion_per_document") is not None:
            return calls * prompt, documents * st["completion_per_document"]
        return calls * prompt, calls * min(completion, spec.max_tokens * (spec.parse_retries + 1))

    def specs(self, role: str, stage: str) -> list[ModelSpec]:
        """The models a role's calls in a stage go to."""
        cfg = self.cfg
        if role == "assistant" and stage == "04_probing":  # the rag targets' models
            return [t.model for t in cfg.planned_targets() if _replies(t) == "assistant" and t.model is not None]
        value = getattr(cfg.models, role) or (cfg.models.assistant[:1] if role == "tagger" else None)
        return value if isinstance(value, list) else [] if value is None else [value]

    def local_seconds(self, stage: str, role: str) -> float:
        """A local call's wall time in the calibration run's stage, else its mean over stages."""
        own = self.per.get(f"{stage}/{role}", {}).get("wall_seconds_per_call")
        timed = [x["wall_seconds_per_call"] for x in self.per.values() if x.get("wall_seconds_per_call")]
        return own or (sum(timed) / len(timed) if timed else self.latency_s)

    def bound_factor(self, stage: str, role: str) -> float | None:
        """The calibration run's time over its lower bound in this stage, else the mean over its
        stages; None when it recorded no rates to compute one from."""
        own = self.per.get(f"{stage}/{role}", {}).get("bound_factor")
        known = [x["bound_factor"] for x in self.per.values() if x.get("bound_factor")]
        return own or (sum(known) / len(known) if known else None)


def estimate(cfg: RunConfig, source: str = "", calibration: dict[str, Any] | None = None, latency_s: float = 1.0,
             prices: dict[str, tuple[float, float]] | None = None, rates: dict[Any, Any] | None = None) -> Estimate:
    """The estimate for a run's parameters (see the module's docstring).

    Args:
        cfg: the parameters.
        source: what to call them in the printout (the file name).
        calibration: per-call figures (default ``load_calibration``'s).
        latency_s: seconds a hosted or served call takes.
        prices: dollars per million (input, output) tokens by model label or name; they win
            over the specs' ``price_per_mtok``.
        rates: this machine's ``machine.Rates`` by local server (``llm.server_of``); see
            ``machine_rates``. Without them local calls take the calibration's seconds per call.
    """
    cal = calibration or load_calibration()
    v = volumes(cfg)
    dev = dev_rows(cfg)
    costing = _Costing(cfg, cal, latency_s)
    lines = _lines(cfg, costing, v, dev, prices or {}, rates or {})
    stage_seconds: dict[str, float] = {}
    for line in lines:  # a stage's servers work at once: the slowest server sets its time
        by_server = stage_seconds.setdefault(line.stage, 0.0)
        stage_seconds[line.stage] = max(by_server, _server_seconds(lines, line, cfg))
    # Stage 04's turns are sequential within a conversation: prober, assistant (and the check).
    if "04_probing" in stage_seconds and not all(s.provider == "local" for s in cfg.models.assistant):
        steps = 2 + (cfg.judging.method == "verdict")
        waves = math.ceil(v["conversations"] / cfg.probing.conversations_in_flight)
        stage_seconds["04_probing"] = max(stage_seconds["04_probing"], waves * cfg.probing.max_rounds * steps * latency_s)
    return Estimate(source, v, lines, stage_seconds, latency_s, cal.get("source", "?"), _notes(cfg, v, dev),
                    _machine(cfg, cal, rates or {}))


def machine_rates(cfg: RunConfig, *, measure_now: bool = True) -> dict[Any, Any]:
    """This machine's rates for each local server the run's roles use (``pbench.machine``):
    measured now where none were kept, a few seconds each. A model that cannot be served
    (its file missing, say) is left out, and its calls take the calibration's seconds."""
    from pbench import machine
    from pbench.llm import LLMError, Roles, server_of

    out: dict[Any, Any] = {}
    for spec in Roles.specs_of(cfg):
        if spec.provider != "local" or server_of(spec) in out:
            continue
        try:
            got = machine.rates(spec, measure_now=measure_now)
        except (LLMError, FileNotFoundError):
            got = None
        if got is not None:
            out[server_of(spec)] = got
    return out


def _machine(cfg: RunConfig, cal: dict[str, Any], rates: dict[Any, Any]) -> str:
    """What the local seconds rest on, as the estimate's one line says it."""
    from pbench.llm import Roles

    if not any(s.provider == "local" for s in Roles.specs_of(cfg)):
        return ""
    if rates and cal.get("rates"):
        return "on this machine (" + "; ".join(r.describe() for r in rates.values()) + ")"
    why = "no rates measured on this machine" if not rates else "the calibration recorded no rates"
    return f"at the calibration run's seconds per call ({why})"


def _lines(cfg: RunConfig, costing: _Costing, v: dict[str, float], dev: list[Any],
           prices: dict[str, tuple[float, float]], rates: dict[Any, Any]) -> list[Line]:
    """One Line per stage, role and model: calls, tokens, seconds and dollars."""
    from pbench.llm import Roles, server_of

    lines: list[Line] = []
    for stage, role, calls in arithmetic(cfg, v, dev, costing.st["components"]):
        if not calls:
            continue
        gates = Roles.gates_of(cfg, stage)  # a model may go by batch in some stages only
        factor = costing.per.get(f"{stage}/{role}", {}).get("calls_factor", 1.0)
        specs = costing.specs(role, stage)
        targets = specs[:1] if stage == "03_rag_assistant" else specs  # notebook 03 asks the first target once
        for spec in targets:
            # Conversations are spread over the targets; the judges each get every call.
            share = calls / len(targets) if role == "assistant" and stage == "04_probing" else calls
            if role == "judge":
                share = calls / len(cfg.models.judge)
            n = share * factor
            p_tok, c_tok = costing.tokens(stage, role, n, spec, v["documents"])
            seconds = n * costing.latency_s / gates[server_of(spec)].limit
            if spec.provider == "local":  # the server's slots are in its measured rates, or in the seconds per call
                rate, over = rates.get(server_of(spec)), costing.bound_factor(stage, role)
                seconds = (over * rate.seconds_for(p_tok, c_tok) if rate is not None and over
                           else n * costing.local_seconds(stage, role))
            price = _price(spec, prices)
            live = None if price is None else (p_tok * price[0] + c_tok * price[1]) / 1e6
            batch_share = spec.price_per_mtok.batch if spec.price_per_mtok is not None else None
            by_batch = None if live is None or batch_share is None else live * batch_share
            lines.append(Line(stage, role, spec.label, n, p_tok, c_tok, seconds,
                              by_batch if spec.batched(stage) and by_batch is not None else live, live, by_batch,
                              spec.batched(stage)))
    return lines


def _notes(cfg: RunConfig, v: dict[str, float], dev: list[Any]) -> list[str]:
    """What the estimate names but cannot time: outside targets, the dev set, a person's labelling."""
    notes = []
    if v["outside_turns"]:
        own = [t.label for t in cfg.planned_targets() if _replies(t) == "own"]
        notes.append(f"the own time of {', '.join(own)} is not estimated: stage 04 waits on up to "
                     f"{v['outside_turns']:.0f} of their replies")
    if dev:
        notes.append(f"stage 05 judges {len(dev)} dev-set rows (the judge's measured error) and stage 07 "
                     f"{cfg.validation.snippets} snippets")
    if v["labelling_conversations"]:
        notes.append(f"then a person's time, not the machine's: labelling {_n(v['labelling_conversations'])} "
                     "conversations in label.html (validation.human_sample) at about "
                     f"{v['labelling_seconds'] / v['labelling_conversations']:.0f} s each, "
                     f"about {_duration(v['labelling_seconds'])}")
    return notes


def _server_seconds(lines: list[Line], line: Line, cfg: RunConfig) -> float:
    """Seconds of the lines of ``line``'s stage that share its server (their calls add up)."""
    from pbench.llm import Roles, server_of

    by_label = {s.label: s for s in Roles.specs_of(cfg)}
    key = server_of(by_label[line.model])
    return sum(x.seconds for x in lines if x.stage == line.stage and server_of(by_label[x.model]) == key)


def compare(est: Estimate, manifest: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(what, estimated, actual) for calls, prompt and completion tokens against a finished
    run's manifest: how the estimate is checked."""
    actual: dict[str, float] = defaultdict(float)
    for rec in manifest.get("stages", {}).values():
        for models in (rec.get("llm") or {}).values():
            for key, value in usage(models).items():
                actual[key] += value
    return [("calls", est.calls, actual["requests"]), ("prompt tokens", est.prompt_tokens, actual["prompt_tokens"]),
            ("completion tokens", est.completion_tokens, actual["completion_tokens"])]
