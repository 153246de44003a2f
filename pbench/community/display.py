"""Tables and figures of a community, for notebook 01: profiles and relationships on a date,
the graph at a few dates, one person's timeline, the validation report and the changes.

Reads a ``CommunityView`` (and ``build``'s report); figures are saved by ``pbench.figures``.
pandas and matplotlib are imported inside the functions that draw or tabulate.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import networkx as nx

from pbench import figures
from pbench.community.facts import DAY
from pbench.community.view import CommunityView
from pbench.schema import TEMPORAL_ATTRIBUTES


def profile_table(view: CommunityView, t: dt.date):
    """One row per person: profile values on day ``t``, contacts and groups then."""
    import pandas as pd

    rows = []
    for pid, p in view.people.items():
        a = view.attributes_at(pid, t)
        rows.append({"id": pid, "name": p.name, "origin": p.origin,
                     **{k: a.get(k, "") for k in ("age", "occupation", "employer", "location", "interests")},
                     "contacts": len(view.contacts_at(pid, t)),
                     "groups": ", ".join(g.name for g in view.groups_at(pid, t))})
    return pd.DataFrame(rows).set_index("id")


def relationship_table(view: CommunityView):
    import pandas as pd

    return pd.DataFrame([{"id": r.id, "a": view.name(r.a), "b": view.name(r.b), "kind": r.kind, "start": r.start,
                          "end": r.end, "source": r.source, "why": r.why} for r in view.c.relationships]).set_index("id")


KIND_COLOURS = {"family": "#d62728", "partner": "#e377c2", "friend": "#2ca02c", "colleague": "#1f77b4",
                "manager": "#17becf", "neighbour": "#ff7f0e", "hobby_friend": "#bcbd22", "classmate": "#9467bd",
                "business_partner": "#8c564b", "acquaintance": "#7f7f7f"}


def short_name(name: str) -> str:
    """'Ana Lucia Ferreira' -> 'Ana F.' (labels that stay distinct when first names repeat)."""
    parts = name.replace("(", " (").split()
    return parts[0] if len(parts) == 1 else f"{parts[0]} {parts[-1][0]}." if not parts[-1].startswith("(") else f"{parts[0]} {parts[-1]}"


def draw_graph_at(view: CommunityView, dates: list[dt.date], path: Path | None = None):
    """The graph at each date: edges coloured by relationship kind, nodes by group.

    Returns:
        The matplotlib figure (also saved as PNG and PDF when ``path`` is given).
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    layout: dict[str, Any] = nx.spring_layout(nx.Graph(view.graph_at(None)), seed=1)
    palette = plt.get_cmap("Pastel1")
    group_colour = {g: palette(i % 9) for i, g in enumerate(view.groups)}
    fig, axes = plt.subplots(1, len(dates), figsize=(5.5 * len(dates), 5.2), squeeze=False)
    for ax, t in zip(axes[0], dates, strict=True):
        g = view.graph_at(t)
        for u, v, data in g.edges(data=True):
            (x1, y1), (x2, y2) = layout[u], layout[v]
            ax.plot([x1, x2], [y1, y2], color=KIND_COLOURS[data["kind"]], lw=2, alpha=0.8, zorder=1)
        for pid, (x, y) in layout.items():
            gs = view.groups_at(pid, t)
            face = group_colour[gs[0].id] if gs else "white"
            ax.scatter([x], [y], s=420, color=face, edgecolors="black", linewidths=1.5 if gs else 0.8, zorder=2)
            ax.annotate(short_name(view.name(pid)), (x, y), ha="center", va="center", fontsize=8, zorder=3)
        ax.set_title(f"{t}: {g.number_of_edges()} active relationships")
        ax.set_axis_off()
    used = sorted({r.kind for r in view.c.relationships})
    handles: list[Any] = [Line2D([0], [0], color=KIND_COLOURS[k], lw=2, label=k) for k in used]
    handles += [Patch(facecolor=group_colour[gid], edgecolor="black", label=f"group: {g.name}") for gid, g in view.groups.items()]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), frameon=False)
    return figures.save(fig, path, rect=(0, 0.1, 1, 1), stamp=False)


def draw_timeline(view: CommunityView, pid: str, path: Path | None = None):
    """One person's changing attributes, relationships and memberships over the period."""
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    start, end = view.period
    rows: list[tuple[str, dt.date, dt.date, str, str]] = []
    for attr in TEMPORAL_ATTRIBUTES:
        for a in view.attribute_history(pid, attr):
            rows.append((attr, a.valid_from, a.valid_to, a.value, "#9ecae1"))
    for r in sorted(view.relationships_at(pid, start) + [r for r in view.c.relationships if pid in (r.a, r.b)
                                                          and r.start > start], key=lambda r: r.id):
        rows.append((f"{r.kind}: {short_name(view.name(r.other(pid)))}", max(r.start, start), min(r.end or end, end),
                     "", KIND_COLOURS[r.kind]))
    for g in view.c.groups:
        for m in g.members:
            if m.person == pid:
                rows.append((f"group: {g.name}"[:28], m.start, m.end, "", "#c7e9c0"))
    labels = list(dict.fromkeys(r[0] for r in rows))
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(labels) + 1.2))
    for label, f, t, text, colour in rows:
        y = labels.index(label)
        x0, width = mdates.date2num(f), mdates.date2num(t + DAY) - mdates.date2num(f)
        ax.barh(y, width, left=x0, color=colour, edgecolor="white", height=0.7)
        if text:
            ax.text(x0 + width / 2, y, text[:40], ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.xaxis_date()
    ax.set_xlim(mdates.date2num(start), mdates.date2num(end + DAY))
    ax.set_title(f"{view.name(pid)} over the period")
    return figures.save(fig, path, stamp=False)


def snapshot_dates(view: CommunityView, n: int = 3) -> list[dt.date]:
    """``n`` evenly spaced days from the period's start to its end."""
    start, end = view.period
    span = (end - start).days
    return [start + dt.timedelta(days=round(i * span / (n - 1))) for i in range(n)] if n > 1 else [start]


def most_eventful(view: CommunityView) -> str:
    """The person whose attributes, relationships and memberships change most (for a timeline)."""
    start, _ = view.period

    def events(pid: str) -> int:
        attrs = sum(len(view.attribute_history(pid, a)) - 1 for a in TEMPORAL_ATTRIBUTES)
        rels = sum(1 for r in view.c.relationships if pid in (r.a, r.b) and (r.start > start or r.end is not None))
        return 3 * attrs + rels + len(view.groups_at(pid, view.period[1]))

    return max(sorted(view.people), key=events)


def validation_table(report: dict[str, Any]):
    """Per check: problems found in the generator's proposal and remaining after repair."""
    import pandas as pd

    return pd.DataFrame({"found in proposal": report["found_in_proposal"],
                         "remaining after repair": report["remaining_after_repair"],
                         "changes made": {k: report["changes_by_check"].get(k, 0) for k in report["found_in_proposal"]}})


def changes_table(view: CommunityView):
    import pandas as pd

    return pd.DataFrame([c.model_dump() for c in view.c.changes], columns=["check", "record", "action"])
