"""What the judges' probabilities say: the log-odds of a one-token yes/no answer (or of
sampled answers, where a provider gives no log-probabilities), G-Eval's weighted digit, and
the ``combined`` method's fitted logistic model (``pbench judge --fit``, ``pbench.judgefit``)."""

from __future__ import annotations

import re
from typing import Any

# What the ``combined`` method weighs per (reply, component); fitted on the dev set's tune split
# (``pbench judge --fit``), the weights in the user's ``judge_fit.json`` (``store.user_dir``),
# else the one shipped in ``pbench/data/``.
FEATURES = ("bias", "model", "similarity", "code", "confirmed", "echo", "pinned")
CODE_FEATURES = tuple(f for f in FEATURES if f != "model")  # the fit used where a provider gives no log-probabilities
FIT_PATH = "judge_fit.json"


def yes_logit(top: Any) -> float | None:
    """log P(yes) - log P(no) of a one-token answer, from the first token's alternatives
    (``Completion.top``; "Yes", " yes", "YES" ... pooled), clipped to [-12, 12]; None when the
    provider gave no log-probabilities or neither word is among them."""
    import math

    if not top:
        return None
    pools: dict[str, list[float]] = {"yes": [], "no": []}
    for token, lp in top:
        word = token.strip().lower()
        if word in pools:
            pools[word].append(lp)
    if not pools["yes"] and not pools["no"]:
        return None
    floor = min(lp for _, lp in top) - 1.0  # below every listed alternative: the absent word's bound

    def pooled(lps: list[float]) -> float:
        return math.log(sum(math.exp(x) for x in lps)) if lps else floor

    return max(-12.0, min(12.0, pooled(pools["yes"]) - pooled(pools["no"])))


def digit_mean(top: Any) -> float | None:
    """G-Eval's score (Liu et al. 2023): the mean of 1-5 weighted by the probabilities of the
    first token's digit alternatives ("3" and " 3" pooled), renormalised over the five. The
    embedded 1.5B spreads its answer over 3-5 (0.34, 0.33, 0.26): its top digit was 5 for all six
    conversations measured (docs/05_scoring.md), the weighted mean tells them apart. None when the provider gave no
    log-probabilities or no digit is among them."""
    import math

    mass = dict.fromkeys(range(1, 6), 0.0)
    for token, lp in top or ():
        word = token.strip()
        if word in ("1", "2", "3", "4", "5"):
            mass[int(word)] += math.exp(lp)
    total = sum(mass.values())
    return sum(d * m for d, m in mass.items()) / total if total > 0 else None


def sampled_logit(texts: list[str]) -> float | None:
    """The log-odds of "yes" from sampled answers, for a provider without log-probabilities:
    the share of yeses among the answers that say yes or no, with half a yes and half a no
    added (so that 5 yeses of 5 give log 11, not infinity); None when none says either."""
    import math

    said = [w for w in (re.sub(r"\W", "", t.strip().split()[0]).lower() if t.strip() else "" for t in texts)
            if w in ("yes", "no")]
    if not said:
        return None
    share = (said.count("yes") + 0.5) / (len(said) + 1)
    return math.log(share / (1 - share))


def load_fit(path: Any = None) -> dict[str, Any] | None:
    """The fitted weights of the ``combined`` method (None when never fitted): from ``path``,
    else the user's own fit (``pbench judge --fit``), else the one the package ships."""
    import json
    from pathlib import Path

    from pbench import store

    path = Path(path) if path else store.user_or_shipped(FIT_PATH)
    return json.loads(path.read_text()) if path.exists() else None


def probability(x: dict[str, float], weights: dict[str, float]) -> float:
    """The fitted logistic model's probability that a component is revealed, from its features."""
    import math

    z = sum(w * float(x.get(k, 0.0)) for k, w in weights.items())
    return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z))))


def fitted_vote(x: dict[str, float], fit: dict[str, Any] | None, with_model: bool) -> tuple[float, bool]:
    """The fitted model's probability that a component is revealed, and whether it reaches
    the fit's cut. Without the model's probability (``with_model`` False), the fit of the
    code's reading alone decides (``fit["without_model"]``); without a fit, 0 and no."""
    fitted = (fit or {}) if with_model else (fit or {}).get("without_model", {})
    p = probability(x, fitted["weights"]) if fitted else 0.0
    return p, p >= fitted.get("cut", 0.5)
