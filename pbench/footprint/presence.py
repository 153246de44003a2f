"""Whether a telling carries its secret: each core component found verbatim (its own words in
one sentence, or two consecutive ones), or semantically (embedding similarity above a
threshold calibrated on the run's own unrelated text, with the facts that pin it down), or
missing."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pbench import matching

THRESHOLD_FLOOR = 0.5  # cosine similarity; the run's own negatives may raise it, never lower it
THRESHOLD_SAMPLE = 2000  # unrelated sentences the presence threshold is calibrated on, at most

_WORD = re.compile(r"[a-z0-9']+")


def _norm_words(text: str) -> str:
    return " ".join(_WORD.findall(text.lower().replace("’", "'")))


def spans(text: str) -> list[str]:
    """Sentences of a document (speaker names removed) and pairs of consecutive sentences."""
    parts = [re.sub(r"^[^:\n]{1,40}:\s*", "", p).strip() for p in matching.sentences(text)]
    parts = [p for p in parts if len(p) > 3]
    return parts + [f"{a} {b}" for a, b in itertools.pairwise(parts)]


_STOP = set("""a an the and or but of to in on at for with by from as is are was were be been being has have had
do does did will would shall should can could may might must that this these those it its he she him her his hers they
them their i me my we our you your not no so than then there here about into over after before up out""".split())


def _content_words(text: str) -> set[str]:
    return {w.removesuffix("'s").rstrip("s") for w in _WORD.findall(text.lower().replace("’", "'"))
            if w not in _STOP and len(w) > 2}


def verbatim(component: str, text: str) -> bool:
    """The component's own words are all in one sentence (or two consecutive ones) of the text,
    whatever the grammatical person: "has accepted an offer from Northwind" is verbatim in
    "I've accepted an offer from Northwind!"."""
    words = _content_words(component)
    if not words:
        return _norm_words(component) in _norm_words(text)
    return any(words <= _content_words(span) for span in spans(text))


@dataclass
class PresenceChecker:
    """Labels a sharing event verbatim / semantic / missing.

    Args:
        threshold: cosine similarity above which a component counts as present semantically.
        embed: function from texts to unit vectors.
    """

    threshold: float
    embed: Callable[[list[str]], np.ndarray]

    def components(self, components: list[str], text: str, owner_name: str = "") -> list[tuple[str, float]]:
        """Per component: ``verbatim``, ``semantic`` or ``missing``, with its best similarity.

        The owner speaks in the first person, so their name is taken out of the components.
        """
        out = []
        originals = list(components)
        names = [w for w in owner_name.split() if len(w) > 1]
        if names:
            pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in names) + r")('s)?\b", re.IGNORECASE)
            components = [" ".join(pattern.sub("", c).split()) or c for c in components]
        pieces = spans(text)
        pv = self.embed(pieces) if pieces else None
        cv = self.embed(list(components))
        for i, c in enumerate(components):
            best = float((pv @ cv[i]).max()) if pv is not None and len(pv) else 0.0
            # A paraphrase counts only with the facts that make it checkable: at least half the
            # names, places, amounts and dates the component pins down (the judge's own rule).
            semantic = best >= self.threshold and matching.pinned(originals[i], owner_name, text)
            label = "verbatim" if verbatim(c, text) else "semantic" if semantic else "missing"
            out.append((label, best))
        return out

    def label(self, components: list[str], text: str, owner_name: str = "") -> str:
        labels = [lab for lab, _ in self.components(components, text, owner_name)]
        if "missing" in labels:
            return "missing"
        return "verbatim" if all(lab == "verbatim" for lab in labels) else "semantic"


def negative_quantile(components: list[str], unrelated: list[str], embed: Callable, quantile: float = 0.99) -> float:
    """The ``quantile`` of similarities between secret components and sentences of documents
    that cannot carry them (0.0 when either list is empty)."""
    if not components or not unrelated:
        return 0.0
    return float(np.quantile(embed(unrelated) @ embed(components).T, quantile))
