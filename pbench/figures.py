"""Saving figures the same way everywhere: PNG for reading, PDF for the write-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save(fig: Any, path: Path | None, rect: tuple[float, float, float, float] | None = None) -> Any:
    """Lay out ``fig`` (within ``rect``, leaving room for a figure legend) and write it as
    ``<path>.png`` and ``<path>.pdf`` (nothing when ``path`` is None); return it."""
    fig.tight_layout(rect=rect)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path.with_suffix(".png"), dpi=110)
        fig.savefig(path.with_suffix(".pdf"), metadata={"CreationDate": None})  # the same bytes each run
    return fig
