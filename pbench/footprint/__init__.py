"""Stage 02: each user's digital footprint, with ground-truth secrets hidden in mundane noise
(paper sections 3.2-3.3, Appendix A.2-A.3, Appendix C.2 stages 2-3).

Reads ``community.json`` (stage 01), the parameters (``footprint``, ``seed``, the
``generator`` role). Writes ``footprint/users/<id>.json`` as each user finishes (a rerun
skips finished users), then ``documents.jsonl``, ``secrets.jsonl``, ``footprint.json``
(validation and cost report) and ``DATASHEET.md``.

Code plans every document (its timestamp, its participants from the graph's state at that
moment, noise or substance, the attribute it reveals with the value valid then); the
generator only writes text, several mundane documents per request. Secrets are proposed
by the generator, their confidants checked against the graph, and each sharing event gets
a conversation of its own, then a check in code that the secret's core components are in
it (verbatim, or by embedding similarity above a threshold calibrated on the run's own
unrelated text); failures are regenerated a bounded number of times, then reported.

The rooms, in the order of the work, each importing only those above it:

- ``plan``: documents and tellings planned by code from the graph (seeded);
- ``presence``: whether a telling carries its secret (verbatim, semantic, missing);
- ``generator``: the model writes the planned documents (``FootprintGenerator``);
- ``dataset``: a dataset read back, and who may know a secret when (``may_know``);
- ``report``: structural checks, ``footprint.json`` and ``DATASHEET.md``;
- ``tables``: tables and figures for the notebooks;
- ``stage``: the run: generate or resume, check the tellings, write the files (``build``).

Callers import from ``pbench.footprint``; modules of this package import each other
directly, never this file.
"""

from pbench.footprint.dataset import Dataset, carried, load_dataset, may_know
from pbench.footprint.generator import (
    BATCH_RETRIES,
    MAX_LINE,
    FootprintGenerator,
    UserResult,
    batch_schema,
    document_of,
    exchange_schema,
    render,
)
from pbench.footprint.plan import (
    AI_TOPICS,
    CONFIDANT_KINDS,
    KIND_VOLUME,
    MUNDANE_TOPICS,
    REVEALABLE,
    Slot,
    plan_secret,
    plan_sharing,
    plan_user,
    substantive_share,
)
from pbench.footprint.presence import (
    THRESHOLD_FLOOR,
    THRESHOLD_SAMPLE,
    PresenceChecker,
    negative_quantile,
    spans,
    verbatim,
)
from pbench.footprint.report import check_dataset, datasheet, stage_report
from pbench.footprint.stage import build
from pbench.footprint.tables import documents_per_kind, draw_documents_timeline, examples, table1
from pbench.tellings import is_exchange, speakers_of, told_between  # the reading of a telling, public here too

__all__ = [
    "Dataset", "carried", "load_dataset", "may_know",
    "BATCH_RETRIES", "MAX_LINE", "FootprintGenerator", "UserResult", "batch_schema", "document_of",
    "exchange_schema", "render",
    "AI_TOPICS", "CONFIDANT_KINDS", "KIND_VOLUME", "MUNDANE_TOPICS", "REVEALABLE", "Slot", "plan_secret",
    "plan_sharing", "plan_user", "substantive_share",
    "THRESHOLD_FLOOR", "THRESHOLD_SAMPLE", "PresenceChecker", "negative_quantile", "spans", "verbatim",
    "check_dataset", "datasheet", "stage_report",
    "build",
    "documents_per_kind", "draw_documents_timeline", "examples", "table1",
    "is_exchange", "speakers_of", "told_between",
]
