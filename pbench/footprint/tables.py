"""Tables and figures of a footprint dataset, for the notebooks: the paper's Table 1, documents
per kind, one user's timeline, and example documents."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

from pbench import figures
from pbench.footprint.dataset import Dataset
from pbench.schema import DOCUMENT_KINDS


def table1(ds: Dataset):
    """The paper's Table 1 for this run: users, documents, secrets shared with person / group / AI."""
    import pandas as pd

    ch = Counter(e.channel for s in ds.secrets for e in s.sharing)
    return pd.DataFrame([{"Users": len(ds.view.people), "Total Docs": len(ds.documents), "Secrets": len(ds.secrets),
                          "Shared with Person": ch["person"], "Shared with Group": ch["group"], "Shared with AI": ch["ai"]}],
                        index=pd.Index([ds.view.c.period_start.year], name="Community"))


def documents_per_kind(ds: Dataset):
    import pandas as pd

    rows = [{"user": ds.view.name(d.owner), "kind": d.kind} for d in ds.documents]
    return pd.crosstab(pd.DataFrame(rows)["user"], pd.DataFrame(rows)["kind"]).reindex(columns=list(DOCUMENT_KINDS), fill_value=0)


def draw_documents_timeline(ds: Dataset, uid: str, path: Path | None = None):
    """One user's documents over time, one row per kind; secret-bearing ones marked."""
    import matplotlib.pyplot as plt

    docs = ds.corpus(uid)
    fig, ax = plt.subplots(figsize=(11, 3.2))
    for y, kind in enumerate(DOCUMENT_KINDS):
        plain = [d.timestamp for d in docs if d.kind == kind and not d.secret_ids]
        secret = [d for d in docs if d.kind == kind and d.secret_ids]
        ax.scatter(plain, [y] * len(plain), s=30, color="#9ecae1", edgecolors="#3182bd", label="document" if y == 0 else None)
        ax.scatter([d.timestamp for d in secret], [y] * len(secret), s=140, marker="*", color="#d62728",
                   label="shares a secret" if y == 0 else None, zorder=3)
        for d in secret:
            ax.annotate(",".join(d.secret_ids), (d.timestamp, y), textcoords="offset points", xytext=(0, 8),
                        ha="center", fontsize=7)
    ax.set_yticks(range(len(DOCUMENT_KINDS)), DOCUMENT_KINDS)
    ax.set_xlim(*[dt.datetime.combine(d, dt.time()) for d in ds.view.period])
    ax.set_title(f"{ds.view.name(uid)}'s footprint")
    handles, labels = ax.get_legend_handles_labels()
    if not any(lab == "shares a secret" for lab in labels):
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], marker="*", color="#d62728", ls="", markersize=12))
        labels.append("shares a secret")
    ax.legend(handles, labels, loc="upper right", fontsize=8)
    return figures.save(fig, path, stamp=False)


def examples(ds: Dataset, per_kind: int = 1):
    """A few documents of each kind (secret-bearing ones first), for reading."""
    import pandas as pd

    rows = []
    for kind in DOCUMENT_KINDS:
        docs = sorted((d for d in ds.documents if d.kind == kind), key=lambda d: (not d.secret_ids, d.id))
        rows += [{"id": d.id, "kind": kind, "when": d.timestamp, "with": ", ".join(ds.view.name(p) for p in d.participants),
                  "secrets": ", ".join(d.secret_ids), "reveals": ", ".join(d.attributes_revealed), "text": d.text}
                 for d in docs[:per_kind]]
    return pd.DataFrame(rows).set_index("id")
