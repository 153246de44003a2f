"""Stage 01's files: ``community.json`` (the community and its validation report) and
``community.graphml`` (the graph, for other tools), written atomically (``pbench.store``); and
``load``, what later stages call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import networkx as nx

from pbench import store
from pbench.community.view import CommunityView
from pbench.schema import Community


def save(community: Community, report: dict[str, Any], run_dir: Path) -> None:
    """Write ``community.json`` and ``community.graphml`` atomically."""
    data = community.model_dump(mode="json")
    data["validation"] = report
    store.write_json(run_dir / "community.json", data)
    store.atomic_write_bytes(run_dir / "community.graphml", "\n".join(nx.generate_graphml(to_graphml(community))).encode())


def load(run_dir: str | Path) -> CommunityView:
    """Read a run's community (what later stages call).

    Raises:
        FileNotFoundError: stage 01 has not run for this run folder.
    """
    path = Path(run_dir) / "community.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; run stage 01_social_graph first")
    data = json.loads(path.read_text(encoding="utf-8"))
    data.pop("validation", None)
    return CommunityView(Community.model_validate(data))


def to_graphml(community: Community) -> nx.MultiGraph:
    """A networkx graph with scalar attributes only (GraphML's limit): profile values as of the
    period's end, relationships with their kind and dates, group ids per person."""
    view = CommunityView(community)
    g: nx.MultiGraph = nx.MultiGraph(period_start=str(community.period_start), period_end=str(community.period_end))
    for p in community.people:
        attrs = view.attributes_at(p.id, community.period_end)
        groups = ",".join(gr.id for gr in community.groups if any(m.person == p.id for m in gr.members))
        g.add_node(p.id, name=p.name, origin=p.origin, groups=groups, **{k: v for k, v in attrs.items()})
    for r in community.relationships:
        g.add_edge(r.a, r.b, key=r.id, kind=r.kind, permanent=r.permanent, start=str(r.start),
                   end="" if r.end is None else str(r.end), why=r.why, source=r.source)
    return g
