"""Saving figures the same way everywhere: PNG for reading, PDF for the write-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pbench import world as worlds


def save(fig: Any, path: Path | None, rect: tuple[float, float, float, float] | None = None,
         stamp: bool = True) -> Any:
    """Lay out ``fig`` (within ``rect``, leaving room for a figure legend) and write it as
    ``<path>.png`` and ``<path>.pdf`` (nothing when ``path`` is None); return it.

    ``stamp`` prints the run folder's world id in a corner. Stages 01 and 02 draw the world
    while it is being made, before it has an id, so they pass False: what their folder holds
    then may be an earlier run's documents, and its id would be stale."""
    fig.tight_layout(rect=rect)
    if path is not None and stamp and (ident := _world_of(path)):
        fig.text(0.995, 0.003, f"world {ident}", ha="right", va="bottom", fontsize=6, color="0.5")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path.with_suffix(".png"), dpi=110)
        fig.savefig(path.with_suffix(".pdf"), metadata={"CreationDate": None})  # the same bytes each run
    return fig


def _world_of(path: Path) -> str | None:
    """The world id of the run folder a figure is saved in (``<run>/figures/...``), if any."""
    for folder in list(Path(path).resolve().parents)[:3]:
        if (ident := worlds.world_id(folder)) is not None:
            return ident
    return None
