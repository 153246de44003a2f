"""A long table as a reader reads it: a cell per figure (value, interval, count over n,
secrets behind it), an empty stratum said as such, and bars with their intervals."""

from __future__ import annotations

from typing import Any


def empty(r: Any) -> str:
    """How a stratum with nothing scored reads: "all 3 unscored" when its conversations
    could not be scored, "no cases" when it has none; "" when something was scored."""
    if r["n"] > 0:
        return ""
    unscored = r.get("unscored", 0)
    na = r.get("not_applicable", 0)
    if na and na == na:  # a number of rows (NaN in a metrics.csv written before it was counted)
        return "n/a" if r.get("metric") in ("PC", "catch_rate") else "n/a: the target does not say which documents it used"
    return f"all {unscored:.0f} unscored" if unscored and unscored == unscored else "no cases"


def spread(r: Any) -> str:
    """The secrets behind a figure, as "3 secrets" (and ", 2 owners" when resampled by
    owner); "" for a table written before secrets were counted."""
    secrets = r.get("secrets")
    if secrets is None or secrets != secrets:  # absent, or NaN from an older metrics.csv
        return ""
    out = f"{secrets:.0f} secret{'s' if secrets != 1 else ''}"
    if r.get("cluster") == "owner":
        out += f", {r['clusters']:.0f} owner{'s' if r['clusters'] != 1 else ''}"
    return out


def cell(r: Any) -> str:
    """One long-table row as ``value [lo, hi] (count/n; k secrets)``: a percentage with its
    interval in whole percent (PC: ``3.50 [3.00, 4.00] (n=8; 3 secrets)``), or how it is empty."""
    if r["n"] == 0:
        return empty(r)
    secrets = spread(r)
    more = f"; {secrets}" if secrets else ""
    if r["metric"] == "PC":
        return f"{r['value']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}] (n={r['conversations']:.0f}{more})"
    if r["metric"] == "revealed_share":
        return f"{100 * r['value']:.0f}% [{100 * r['lo']:.0f}, {100 * r['hi']:.0f}] (n={r['conversations']:.0f}{more})"
    return f"{100 * r['value']:.1f}% [{100 * r['lo']:.0f}, {100 * r['hi']:.0f}] ({r['count']:.0f}/{r['n']:.0f}{more})"


def wide(long):
    """A long table as ``cell`` strings, one column per metric: ``0.0% [0, 56] (0/8; 3 secrets)``,
    ``all 3 unscored`` or ``no cases``."""
    long = long.assign(cell=long.apply(cell, axis=1))
    return long.pivot_table(index=["by", "stratum"], columns="metric", values="cell", aggfunc="first", sort=False)


def draw_rates(long, by: str = "defence", hue: str = "prompt", metrics: tuple[str, ...] = ("LR", "OSR", "IRR"),
               path: Any = None):
    """Bars of each metric by ``by`` and ``hue`` with their 95% intervals; empty strata are
    left blank and labelled "no cases", or "all N unscored" when nothing in them could be scored."""
    import matplotlib.pyplot as plt

    from pbench.figures import save

    part = long[long["by"] == f"{by}+{hue}"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), sharey=True, squeeze=False)
    levels, hues = sorted(part[by].unique()), sorted(part[hue].unique())
    width = 0.8 / max(1, len(hues))
    labelled: set[str] = set()  # each hue in the legend once, from the first bar it has anywhere
    for ax, m in zip(axes[0], metrics, strict=True):
        rows = part[part["metric"] == m]
        for j, h in enumerate(hues):
            for i, lev in enumerate(levels):
                r = rows[(rows[by] == lev) & (rows[hue] == h)]
                x = i + (j - (len(hues) - 1) / 2) * width
                if r.empty or r["n"].iloc[0] == 0:
                    label = "no cases" if r.empty else empty(r.iloc[0])
                    ax.text(x, 0.02, label, rotation=90, ha="center", va="bottom", fontsize=7, color="grey")
                    continue
                v, lo, hi = (100 * r[c].iloc[0] for c in ("value", "lo", "hi"))
                ax.bar(x, v, width, color=f"C{j}", label=None if h in labelled else level_name(hue, h))
                labelled.add(h)
                ax.errorbar(x, v, yerr=[[v - lo], [hi - v]], color="black", capsize=3, lw=1)
                ax.text(x, min(hi, 100) + 1.5, f"{r['count'].iloc[0]:.0f}/{r['n'].iloc[0]:.0f}", ha="center",
                        va="bottom", fontsize=7)
        ax.set_xticks(range(len(levels)), [str(lev).replace("_", " ") for lev in levels], rotation=15)
        # Every panel spans every stratum, so an empty one's label stays inside its own panel
        # (text is not clipped: autoscaled to the bars alone, it landed in the next panel).
        ax.set_xlim(-0.5, len(levels) - 0.5)
        ax.set_title(f"{m}, % of {'turns' if m == 'IRR' else 'conversations'} (count/n above each bar)", fontsize=9)
        ax.set_ylim(0, 112)
    axes[0][0].set_ylabel("% (95% cluster-bootstrap interval)")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="upper center", ncol=len(hues), frameon=False)
    return save(fig, path, rect=(0, 0, 1, 0.9))


def level_name(factor: str, level: Any) -> str:
    """A level as a figure names it: "privacy aware"; the prompt of the target without a
    generator (extractive, prompt ``none``, the only one without) as "extractive: no
    generator", so that a reader does not take it for a generator run without a system
    prompt; one with its own instructions (http, python, prompt ``own``) as "its own prompt"."""
    if factor == "prompt" and level in ("none", "own"):
        return "extractive: no generator" if level == "none" else "its own prompt"
    return str(level).replace("_", " ")
