"""Stage 06: the paper's tables and figures, regenerated from a run's records alone.

Reads ``community.json``, ``documents.jsonl``, ``secrets.jsonl``, ``conversations.jsonl``,
``judgements.jsonl`` and ``metrics.csv``; calls no model. Writes ``tables/`` (CSV, LaTeX
and Markdown) and ``figures/`` (PNG and PDF).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pbench import correction, metrics, store

RATE_METRICS = ("LR", "OSR", "IRR")


def load(run_dir: str | Path) -> dict[str, Any]:
    """A finished run's records: dataset, conversations, judgements, long metrics.

    Raises:
        FileNotFoundError: a stage's file is missing, naming the stage to rerun.
    """
    import pandas as pd

    from pbench import footprint, probing

    run_dir = Path(run_dir)
    for name, stage in (("judgements.jsonl", "05_scoring"), ("metrics.csv", "05_scoring"),
                        ("conversations.jsonl", "04_probing")):
        if not (run_dir / name).exists():
            raise FileNotFoundError(f"{run_dir / name}: missing; run stage {stage} first")
    return {"ds": footprint.load_dataset(run_dir), "convs": probing.load_conversations(run_dir),
            "judgements": store.read_jsonl(run_dir / "judgements.jsonl"),
            "long": pd.read_csv(run_dir / "metrics.csv")}


def table2(long):
    """Table 2: per strategy, per target model, LR / OSR / IRR / PC under each system
    prompt, each cell ``value [95% interval] (count/n; k secrets)`` (``metrics.cell``; PC on
    1-5): the paper's layout, with what its bare percentages leave out."""
    import pandas as pd

    part = long[long["by"] == "target+strategy+prompt"]
    # A target without a system prompt (extractive: prompt "none") gets a column of its own.
    prompts = ["baseline", "privacy_aware", *sorted(set(part["prompt"]) - {"baseline", "privacy_aware"})]
    rows = []
    for (strategy, target), g in part.groupby(["strategy", "target"], sort=True):
        row: dict[Any, Any] = {"strategy": strategy, "model": target}  # (metric, prompt) columns too
        for prompt in prompts:
            for m in ("LR", "OSR", "IRR", "PC"):
                r = g[(g["prompt"] == prompt) & (g["metric"] == m)]
                row[(m, prompt)] = metrics.cell(r.iloc[0]) if len(r) else "no cases"
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df = df.set_index(["strategy", "model"])
    df.columns = pd.MultiIndex.from_tuples(df.columns, names=["metric", "prompt"])
    return df


def defence_table(long):
    """LR, OSR, IRR, PC and the catch rate per defence and prompt, as value [interval] (count/n)."""
    part = long[long["by"] == "defence+prompt"]
    return metrics.wide(part).droplevel("by")


def surface_table(long):
    """Every strategy (the paper's two, pretext and delegation) under each target, prompt and
    defence it ran: LR, revealed share, IRR and PC as value [interval] (count/n), with LR
    corrected for the judge's error where the long table has it (``metrics.BY_STRATEGY``,
    scope ``all``); empty when the run probed only the paper's chat."""
    part = long[long["by"] == "+".join(metrics.BY_STRATEGY)]
    if part.empty:
        return part
    part = part[part["metric"].isin(SURFACE_METRICS)]
    df = metrics.wide(part).droplevel("by")[[m for m in SURFACE_METRICS if m in set(part["metric"])]]
    if "corrected" in part:
        lr = part[part["metric"] == "LR"].set_index("stratum")
        df.insert(1, "LR corrected", [correction.cell(lr.loc[k]) for k in df.index])
    df.index = df.index.str.split("/", expand=True).set_names(list(metrics.BY_STRATEGY))
    return df


SURFACE_METRICS = ("LR", "revealed_share", "IRR", "PC")


def draw_surfaces(long, path: Path | None = None):
    """LR by strategy, one bar per target, prompt and defence, with 95% intervals: where the
    paper's chat, a pretext and a delegated draft differ for the same assistant."""
    import matplotlib.pyplot as plt

    from pbench.figures import save

    part = long[(long["by"] == "+".join(metrics.BY_STRATEGY)) & (long["metric"] == "LR")]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    strategies = [s for s in metrics.SURFACES if s in set(part["strategy"])]
    cells = sorted({(t, p, d) for t, p, d in zip(part["target"], part["prompt"], part["defence"], strict=True)})
    width = 0.8 / max(1, len(cells))
    for j, (target, prompt, defence) in enumerate(cells):
        for i, strategy in enumerate(strategies):
            r = part[(part["strategy"] == strategy) & (part["target"] == target) & (part["prompt"] == prompt)
                     & (part["defence"] == defence)]
            x = i + (j - (len(cells) - 1) / 2) * width
            if r.empty or r["n"].iloc[0] == 0:
                ax.text(x, 1, "no cases" if r.empty else metrics.empty(r.iloc[0]), rotation=90, ha="center",
                        va="bottom", fontsize=6, color="grey")
                continue
            v, lo, hi = (100 * r[c].iloc[0] for c in ("value", "lo", "hi"))
            ax.bar(x, max(v, 0.8), width, color=f"C{j}",
                   label=f"{target if prompt == 'none' else target + ', ' + metrics.level_name('prompt', prompt)}"
                         f"{' (no generator)' if prompt == 'none' else ''}, {defence.replace('_', ' ')}" if i == 0 else None)
            ax.errorbar(x, v, yerr=[[v - lo], [hi - v]], color="black", capsize=2, lw=1)
            ax.text(x, hi + 1.5, f"{r['count'].iloc[0]:.0f}/{r['n'].iloc[0]:.0f}", ha="center", fontsize=6)
    ax.set_xticks(range(len(strategies)), strategies)
    ax.set_ylabel("leakage rate, % (95% interval)")
    ax.set_ylim(0, 110)
    ax.set_title("leakage by attack surface (bars at 0% drawn thin; count/n above each)", fontsize=10)
    # Below the axes: inside them it covers the leftmost bars' counts.
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    return save(fig, path)


def write_table(df, folder: Path, name: str) -> None:
    """``name`` as CSV, LaTeX and Markdown under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    store.atomic_write_text(folder / f"{name}.tex", df.to_latex(escape=True))
    flat = df.copy()
    if flat.columns.nlevels > 1:
        flat.columns = [" ".join(str(c) for c in col).replace("_", " ") for col in flat.columns]
    flat = flat.reset_index()
    store.atomic_write_text(folder / f"{name}.csv", flat.to_csv(index=False))
    store.atomic_write_text(folder / f"{name}.md", flat.to_markdown(index=False))


# --------------------------------------------------------------------------- figures


def draw_tradeoff(long, path: Path | None = None):
    """Privacy against utility: LR (lower is private) against OSR (lower is helpful), one
    point per defence and prompt, with 95% intervals."""
    import matplotlib.pyplot as plt

    from pbench.figures import save

    part = long[long["by"] == "defence+prompt"]
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    markers = {"baseline": "o", "privacy_aware": "s", "none": "^"}  # none: a target without a prompt (extractive)
    for i, defence in enumerate(sorted(part["defence"].unique())):
        for prompt, marker in markers.items():
            g = part[(part["defence"] == defence) & (part["prompt"] == prompt)].set_index("metric")
            if g.empty or "LR" not in g.index or "OSR" not in g.index:
                continue
            lr, osr = g.loc["LR"], g.loc["OSR"]
            if lr["n"] == 0 or osr["n"] == 0:
                continue
            x, y = 100 * osr["value"], 100 * lr["value"]
            xerr = [[x - 100 * osr["lo"]], [100 * osr["hi"] - x]]
            yerr = [[y - 100 * lr["lo"]], [100 * lr["hi"] - y]]
            x, y = nudge(x, y, len(markers) * i + list(markers).index(prompt))
            ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=marker, color=f"C{i}", capsize=3,
                        label=f"{defence.replace('_', ' ')}, {metrics.level_name('prompt', prompt)} "
                              f"(LR n={lr['n']:.0f}, OSR n={osr['n']:.0f})")
    ax.set_xlabel("over-secrecy rate, % (lower: more helpful)")
    ax.set_ylabel("leakage rate, % (lower: more private)")
    ax.set_xlim(-5, 105)
    ax.set_ylim(-5, 105)
    ax.set_title("privacy-utility trade-off per defence\n(points shifted slightly so equal ones stay visible)", fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    return save(fig, path)


def nudge(x: float, y: float, k: int) -> tuple[float, float]:
    """The ``k``-th point of a plot shifted a little, in a fixed pattern, so that equal
    points do not hide each other (by at most 1.5 points on a 0-100 axis)."""
    return x + 1.5 * (k % 3 - 1), y + 1.5 * (k // 3 - 1)


def draw_rounds(judgements: list[dict], max_rounds: int, path: Path | None = None):
    """Cumulative leakage rate by round, per strategy."""
    import matplotlib.pyplot as plt

    from pbench.figures import save

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for i, strategy in enumerate(sorted({r["strategy"] for r in judgements})):
        part = [r for r in judgements if r["strategy"] == strategy]
        df = metrics.first_leak_rounds(part, max_rounds)
        n = sum(not r["authorised"] and r["verdict"] != "unscored" for r in part)
        # Dashes per strategy: equal curves (all at 0% in a small run) stay visible.
        ax.step(df["round"], 100 * df["cumulative_LR"].fillna(0), where="post", color=f"C{i}",
                ls=("-", "--", ":", "-.")[i % 4], lw=1.8, label=f"{strategy} (n={n} conversations)")
    ax.set_xlabel("round of the conversation")
    ax.set_ylabel("cumulative leakage rate, % of conversations")
    ax.set_xticks(range(1, max_rounds + 1))
    ax.set_ylim(-3, 105)  # a curve at 0% stays above the axis
    ax.legend()
    ax.set_title("when secrets leak")
    return save(fig, path)


def draw_irr_lr(long, path: Path | None = None):
    """IRR against LR per defence and prompt: the gap is what the generator catches."""
    import matplotlib.pyplot as plt

    from pbench.figures import save

    part = long[long["by"] == "defence+prompt"]
    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    for i, ((defence, prompt), g) in enumerate(part.groupby(["defence", "prompt"])):
        g = g.set_index("metric")
        if g.loc["IRR", "n"] == 0 or g.loc["LR", "n"] == 0:
            continue
        irr, lr = g.loc["IRR"], g.loc["LR"]
        x, y = 100 * irr["value"], 100 * lr["value"]
        xerr, yerr = [[x - 100 * irr["lo"]], [100 * irr["hi"] - x]], [[y - 100 * lr["lo"]], [100 * lr["hi"] - y]]
        x, y = nudge(x, y, i)
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", color=f"C{i}", capsize=3,
                    label=f"{metrics.level_name('prompt', prompt)}, defence {metrics.level_name('defence', defence)} "
                          f"(IRR {irr['count']:.0f}/{irr['n']:.0f} turns, LR {lr['count']:.0f}/{lr['n']:.0f})")
    ax.plot([0, 100], [0, 100], color="grey", lw=0.8, ls="--")
    ax.text(60, 50, "leaks = inappropriate retrievals", rotation=38, color="grey", fontsize=7)
    ax.set_xlabel("inappropriate retrieval rate, % of turns")
    ax.set_ylabel("leakage rate, % of conversations")
    ax.set_xlim(-5, 105)
    ax.set_ylim(-5, 105)
    ax.legend(fontsize=7)
    ax.set_title("retrieval exposes, generation leaks (95% intervals)\n"
                 "(points shifted slightly so equal ones stay visible)", fontsize=10)
    return save(fig, path)


def draw_breakdowns(long, path: Path | None = None):
    """LR by sharing channel and by relationship kind, with 95% intervals."""
    import matplotlib.pyplot as plt

    from pbench.figures import save

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
    for ax, by in zip(axes, ("channel", "relationship"), strict=True):
        g = long[(long["by"] == by) & (long["metric"] == "LR")]
        labels, vals, lo, hi = [], [], [], []
        for _, r in g.iterrows():
            labels.append(f"{r['stratum']}\n(n={r['n']})")
            ok = r["n"] > 0
            vals.append(100 * r["value"] if ok else 0)
            lo.append(100 * (r["value"] - r["lo"]) if ok else 0)
            hi.append(100 * (r["hi"] - r["value"]) if ok else 0)
        ax.bar(range(len(vals)), vals, color="C3")
        ax.errorbar(range(len(vals)), vals, yerr=[lo, hi], fmt="none", color="black", capsize=3)
        for x, (v, h, (_, r)) in enumerate(zip(vals, hi, g.iterrows(), strict=True)):  # a zero bar still says so
            ax.text(x, min(v + h, 100) + 1.5, f"{r['count']:.0f}/{r['n']:.0f}" if r["n"] else metrics.empty(r),
                    ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(vals)), labels, fontsize=8)
        ax.set_title(f"leakage rate by {by}, % of conversations\n"
                     "(95% interval, secrets resampled; count/n above each bar)", fontsize=10)
        ax.set_ylim(0, 112)
    axes[0].set_ylabel("LR, %")
    return save(fig, path)


def draw_leak_graph(ds: Any, judgements: list[dict], path: Path | None = None):
    """The community at the end of the period, people whose secrets leaked in red (size:
    number of leaking conversations)."""
    import matplotlib.pyplot as plt
    import networkx as nx

    from pbench.figures import save

    view = ds.view
    g: nx.Graph = nx.Graph(view.graph_at(view.period[1]))
    leaks: dict[str, int] = {}
    for r in judgements:
        if r["verdict"] == "leak":
            leaks[r["owner"]] = leaks.get(r["owner"], 0) + 1
    pos = nx.spring_layout(g, seed=1)
    fig, ax = plt.subplots(figsize=(6, 5))
    nx.draw_networkx_edges(g, pos, ax=ax, alpha=0.4)
    nx.draw_networkx_nodes(g, pos, ax=ax, node_color=["#d62728" if n in leaks else "#9ecae1" for n in g.nodes],
                           node_size=[300 + 250 * leaks.get(n, 0) for n in g.nodes])
    nx.draw_networkx_labels(g, pos, {n: view.name(n).split()[0] for n in g.nodes}, ax=ax, font_size=8)
    ax.set_title("whose secrets leaked (red; size: leaking conversations)")
    ax.axis("off")
    return save(fig, path)


def headline(long) -> dict[str, str]:
    """The run's overall figures with their 95% intervals, counts and secrets, formatted:
    what ``make demo`` prints at the end and the report's headline boxes show.

    Returns:
        Label to figure, e.g. ``"leakage rate": "0.0% [0, 56] (0/8 conversations, 3 secrets)"``;
        IRR counts turns, PC reads ``3.50 / 5 [3.00, 4.00] (8 conversations, 3 secrets)``; an
        empty figure reads ``all 3 unscored`` or ``no cases``, and unscored conversations
        are named after the counts (``; 2 unscored``). LR and OSR, where the long table has
        the corrected columns (``pbench.correction``), go on with ``as judged;`` and the
        corrected figure with the judge's measured error, or why there is none
        (``SEPARATOR`` splits the two for the report's cards).
    """
    part = long[long["by"] == "all"].set_index("metric")
    out = {}
    for m, label in (("LR", "leakage rate"), ("OSR", "over-secrecy rate"), ("IRR", "inappropriate retrieval rate"),
                     ("PC", "persona consistency")):
        r = part.loc[m]
        if r["n"] == 0:
            out[label] = metrics.empty(r)
            continue
        secrets = metrics.spread(r)
        unscored = f"; {r['unscored']:.0f} unscored" if r.get("unscored", 0) else ""
        if m == "PC":
            counted = f"{r['conversations']:.0f} conversations"
            figure = f"{r['value']:.2f} / 5 [{r['lo']:.2f}, {r['hi']:.2f}]"
        else:
            counted = f"{r['count']:.0f}/{r['n']:.0f} {'turns' if m == 'IRR' else 'conversations'}"
            figure = f"{100 * r['value']:.1f}% [{100 * r['lo']:.0f}, {100 * r['hi']:.0f}]"
        out[label] = f"{figure} ({counted}{', ' + secrets if secrets else ''}{unscored})"
        if "correction" in r and isinstance(r["correction"], str) and r["correction"]:
            fixed = correction.figure(r)
            out[label] += f"{SEPARATOR}{fixed + ' ' if fixed else ''}{r['correction']}"
    return out


SEPARATOR = " as judged; "


def caution(judgements: list[dict], conversations: int = 30, secrets: int = 10) -> str:
    """A warning when the run is too small to tell anything apart (fewer than
    ``conversations`` scored conversations or fewer than ``secrets`` distinct secrets among
    them), naming its numbers; "" otherwise."""
    scored = [r for r in judgements if r["verdict"] != "unscored"]
    n, k = len(scored), len({r["secret_id"] for r in scored})
    if n >= conversations and k >= secrets:
        return ""
    # Not "nothing is conclusive": a large enough difference shows even here (Findings say which).
    return (f"few conversations ({n} scored, {k} secret{'s' if k != 1 else ''}): intervals are wide; "
            "only a large difference can show (Findings name any)")


# --------------------------------------------------------------------------- several runs


def run_names(run_dirs: list[Path]) -> list[str]:
    """Each run's folder name, or its whole path where two runs share a folder name."""
    names = [Path(d).name for d in run_dirs]
    return [n if names.count(n) == 1 else str(d) for n, d in zip(names, run_dirs, strict=True)]


class MixedWorlds(ValueError):
    """Runs on different worlds asked into one comparison without ``mixed_worlds``."""


def worlds_of(run_dirs: list[Path], mixed_worlds: bool = False) -> dict[str, str]:
    """Each run's world id, by run name.

    Raises:
        MixedWorlds: the runs are on more than one world and ``mixed_worlds`` is not set
            (their numbers come from different communities, secrets and footprints).
    """
    from pbench import world

    ids = {name: world.world_id(d) or "?" for d, name in zip(run_dirs, run_names(run_dirs), strict=True)}
    if len(set(ids.values())) > 1 and not mixed_worlds:
        listed = ", ".join(f"{n} ({w})" for n, w in ids.items())
        raise MixedWorlds(f"the runs are on different worlds: {listed}; run them on one packed world "
                          "(pbench run FILE --world PATH), or pass --mixed-worlds to label each row with its world")
    return ids


PAPER_ROW = ("target", "prompt", "defence")
"""A row of the paper's Table 2 across runs: one assistant, the model under one system prompt
and one retrieval defence."""


def paper_table(runs: dict[str, tuple[list[dict[str, Any]], Any]], seed: int = 0):
    """The paper's Table 2 over runs on one world: a row per run and target (model x prompt x
    defence) that ran the paper's chat protocol, with LR, OSR, IRR and PC as
    ``value [95% interval] (count/n; k secrets)`` and LR and OSR also corrected for the run's
    measured judge error (or why they are not). ``runs`` maps a run's name to its judgement
    records and its judge error (``correction.load``)."""
    import pandas as pd

    out = []
    for name, (rows, errors) in runs.items():
        long = metrics.table(rows, PAPER_ROW, metrics=TABLE2_METRICS, seed=seed)
        long = long[long.groupby("stratum")["conversations"].transform("sum") > 0]  # combinations never planned
        if long.empty:
            continue
        long = correction.add_columns(long, rows, errors, seed)
        for _, g in long.groupby("stratum", sort=False):
            first = g.iloc[0]
            row: dict[str, Any] = {"run": name, **{k: first[k] for k in PAPER_ROW}}
            for _, r in g.iterrows():
                row[r["metric"]] = metrics.cell(r)
                if r["metric"] in correction.JUDGED:
                    row[f"{r['metric']} corrected"] = correction.cell(r)
            out.append(row)
    columns = ["run", *PAPER_ROW, "LR", "LR corrected", "OSR", "OSR corrected", "IRR", "PC"]
    return pd.DataFrame(out, columns=columns).set_index(["run", *PAPER_ROW])


TABLE2_METRICS = ("LR", "OSR", "IRR", "PC")


def compare(run_dirs: list[Path], out_dir: Path, mixed_worlds: bool = False) -> tuple[Any, list[Any]]:
    """Aggregate runs (several communities, or one community under several targets) into
    one table, one figure and their findings: each run's overall LR, OSR, IRR and PC and its
    per-target rows; which differences between runs, and between targets within a run, are
    decided by a permutation test over whole clusters (``findings.across``).

    Writes ``comparison.csv`` / ``.md`` / ``.tex``, the paper's Table 2 across the runs
    (``paper_table``) as ``table2.csv`` / ``.md`` / ``.tex``, ``findings.md`` and
    ``figures/comparison`` under ``out_dir``; every row names its run's world (with
    ``mixed_worlds``, in the run's label).
    Returns:
        Table 2 across the runs and the findings.
    Raises:
        MixedWorlds: runs on different worlds, unless ``mixed_worlds``.
        FileNotFoundError: a run without ``metrics.csv`` or ``judgements.jsonl``, naming it
            and the stage to rerun.
    """
    import matplotlib.pyplot as plt
    import pandas as pd

    from pbench import findings
    from pbench.figures import save

    ids = worlds_of(run_dirs, mixed_worlds)
    mixed = len(set(ids.values())) > 1
    parts, rows, errors = [], {}, {}
    for d, base in zip(run_dirs, run_names(run_dirs), strict=True):
        name = f"{base} [{ids[base]}]" if mixed else base
        for file in ("metrics.csv", "judgements.jsonl"):
            if not (Path(d) / file).exists():
                raise FileNotFoundError(f"{Path(d) / file}: missing; run stage 05_scoring of {d} first")
        long = pd.read_csv(Path(d) / "metrics.csv")
        part = long[long["by"].isin(["all", "target", "+".join(metrics.BY_STRATEGY)])].copy()
        part.insert(0, "run", name)
        part["world_id"] = ids[base]
        parts.append(part)
        rows[name] = store.read_jsonl(Path(d) / "judgements.jsonl")
        errors[name] = correction.load(d)
    long = pd.concat(parts, ignore_index=True)
    table = metrics.wide(long.assign(by=long["run"] + " · " + long["by"]))
    write_table(table, out_dir, "comparison")
    paper = paper_table({name: (rows[name], errors[name]) for name in rows})
    write_table(paper, out_dir, "table2")
    found = findings.across(rows, errors=errors)
    store.atomic_write_text(out_dir / "findings.md", "# Findings across runs"
                            + ("" if mixed else f" (world `{next(iter(ids.values()))}`)") + "\n\n" + findings.markdown(found))
    overall = long[(long["by"] == "all") & long["metric"].isin(RATE_METRICS)]
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(run_dirs), 3.6))
    runs = list(dict.fromkeys(overall["run"]))
    width = 0.8 / len(RATE_METRICS)
    for j, m in enumerate(RATE_METRICS):
        for i, r in enumerate(runs):
            row = overall[(overall["run"] == r) & (overall["metric"] == m)]
            if row.empty or row["n"].iloc[0] == 0:
                continue
            v, lo, hi = (100 * row[c].iloc[0] for c in ("value", "lo", "hi"))
            x = i + (j - 1) * width
            ax.bar(x, v, width, color=f"C{j}", label=m if i == 0 else None)
            ax.errorbar(x, v, yerr=[[v - lo], [hi - v]], color="black", capsize=3, lw=1)
    n = {r: overall[(overall["run"] == r) & (overall["metric"] == "LR")]["n"].sum() for r in runs}
    ax.set_xticks(range(len(runs)), [f"{r}\n(LR n={n[r]:.0f})" for r in runs])
    ax.set_ylabel("% (95% interval)")
    ax.set_ylim(0, 105)
    ax.legend()
    ax.set_title("runs compared (95% intervals, secrets resampled; n under each run in comparison.md)", fontsize=10)
    save(fig, out_dir / "figures" / "comparison")
    return paper, found
