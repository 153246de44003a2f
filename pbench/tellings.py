"""How a telling reads: who speaks in a conversation document, and whether a secret's
telling is an exchange. Shared by stage 02, which regenerates a telling that is not, and the
content audit, which counts them; both import it from here (``pbench.footprint`` names them
too)."""

from __future__ import annotations

import re
from typing import Any

from pbench.schema import Document

_SPEAKER = re.compile(r"(?m)^([^\W\d_][\w'-]*(?: [^\W\d_][\w'-]*)?):")


def speakers_of(text: str) -> list[str]:
    """The speakers of a conversation document, one per line that starts with "Name:" (names
    in any script: Álvaro and İpek as well as Alice; each word capitalised)."""
    return [m.group(1) for m in _SPEAKER.finditer(text) if all(w[0].isupper() for w in m.group(1).split())]


def told_between(doc: Document, view: Any) -> bool:
    """A telling in a chat or group chat is an exchange; in an AI chat, the owner speaks."""
    if doc.kind in ("chat", "group_chat"):
        return is_exchange(doc, view)
    return view.name(doc.owner).split()[0] in speakers_of(doc.text)


def is_exchange(doc: Document, view: Any) -> bool:
    """Whether a chat or group chat is an exchange: every line starts with a participant's
    first name, the owner speaks, and so does someone else."""
    lines = [ln for ln in doc.text.splitlines() if ln.strip()]
    said = speakers_of(doc.text)
    names = {view.name(p).split()[0] for p in doc.participants}
    owner = view.name(doc.owner).split()[0]
    return (len(said) == len(lines) and set(said) <= names and owner in said and len(set(said)) >= 2)
