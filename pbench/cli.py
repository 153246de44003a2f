"""The ``pbench`` command.

    pbench check FILE [--world PATH]  validate a parameter file (exit 2 when invalid)
    pbench run FILE [--stages ...] [--force] [--world PATH]
                                      run the notebooks of the pipeline, resuming finished stages
    pbench world pack RUN --out DIR --name NAME --version V
                                      freeze a run's stages 01-02 as a world others can run on
    pbench world verify DIR           check a packed world's files against its hashes
    pbench models [NAME ...]          assemble and verify the embedded model files
    pbench judge --params FILE --input IN.jsonl --output OUT.jsonl
                                      judge any transcript file with the configured panel
    pbench batch FILE...              run several parameter files (each its own run folder)
    pbench compare RUN... [--output DIR]
                                      one table, figure and findings across finished runs
    pbench estimate FILE [--world PATH] [--latency S] [--price MODEL=IN,OUT] [--against RUN] [--no-measure]
                                      calls, tokens, time and cost of a run, before it starts
    pbench estimate --calibrate RUN [--output FILE]
                                      per-call figures of a finished run, for the estimate
    pbench agreement RUN LABELS.json [LABELS.json ...]
                                      people's labels of a run (label.html) against its judges
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from pbench import config


def _on_world(args: argparse.Namespace) -> None:
    """``--world PATH``: the parameters are read as on that world, as ``pbench run --world`` reads them."""
    if getattr(args, "world", None):
        import os
        from pathlib import Path

        os.environ[config.WORLD_ENV] = str(Path(args.world).resolve())


def _check(args: argparse.Namespace) -> int:
    _on_world(args)
    cfg = config.load(args.file)
    config.verify_model_files(cfg)
    roles = {r: getattr(cfg.models, r) for r in ("generator", "assistant", "prober", "judge", "tagger")}
    roles["tagger"] = roles["tagger"] or cfg.models.assistant[0]
    bound = "; ".join(
        f"{r}: {', '.join(s.label for s in v) if isinstance(v, list) else v.label}" for r, v in roles.items()
    )
    planned = ", ".join(f"{t.label} ({config.kind(t.kind).title})" for t in cfg.planned_targets())
    print(f"{args.file}: ok (run {cfg.run_name}; {bound}; targets: {planned})")
    return 0


def _run(args: argparse.Namespace) -> int:
    from pbench import run

    stages = [s for chunk in args.stages or [] for s in chunk.split(",") if s]
    try:
        run.run(args.file, stages=stages or None, force=args.force, progress=not args.quiet, world=args.world)
    except run.StageFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _world(args: argparse.Namespace) -> int:
    from pbench import world

    try:
        if args.action == "pack":
            from pathlib import Path

            name = args.name or Path(args.path).resolve().name
            out = args.out or f"worlds/{name}-v{args.version}"
            made = world.pack(args.path, out, name, args.version)
            print(f"packed {made['name']} {made['version']} ({made['world_id']}) into {out}: "
                  f"{len(made['files'])} files and {len(made['hf_files'])} of its Hugging Face layout (hf/); "
                  f"run on it with: pbench run FILE --world {out}")
        else:
            w = world.verify(args.path)
            print(f"{args.path}: ok, {w.label}: {len(w.manifest['files'])} files match their sha256")
    except world.WorldError as exc:
        raise config.ConfigError(str(exc)) from None
    return 0


def _models(args: argparse.Namespace) -> int:
    from pbench import embedded

    names = args.names or embedded.installed()
    if not names:
        print("error: no embedded model package is installed (see requirements.txt)", file=sys.stderr)
        return 1
    for name in names:
        path = embedded.ensure(name)
        print(f"{name}: ok, sha256 verified ({embedded.EMBEDDED[name].description}) -> {path}")
    return 0


def _judge(args: argparse.Namespace) -> int:
    from pathlib import Path

    import time

    from tqdm import tqdm

    from pbench import judging, llm, store

    cfg = config.load(args.params)
    if args.explain:
        from pbench import judgefit

        print(judgefit.explain(judging.load_fit()))
        return 0
    if args.fit:
        return _fit(cfg, args)
    if not args.input or not args.output:
        print("error: pbench judge needs --input and --output (or --fit, or --explain)", file=sys.stderr)
        return 2
    src, dst = Path(args.input), Path(args.output)
    if not src.is_file():
        print(f"error: {src}: no such input file", file=sys.stderr)
        return 2
    if dst.resolve() == src.resolve():
        print(f"error: --output {dst} is the input file; choose another path", file=sys.stderr)
        return 2
    rows, errors = judging.read_rows(src)
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    if args.split:
        from pbench.validation import dev_sample

        rows = dev_sample(rows, None, 0, args.split)
        if not rows:
            print(f"error: {src}: no row has split {args.split!r}", file=sys.stderr)
            return 2
    if args.derive:  # audit the component rules: ignore the components the rows give
        rows = [r.model_copy(update={"components": None}) for r in rows]
    roles = llm.Roles(cfg, cfg.outputs_dir / cfg.run_name)
    panel = judging.Panel.from_config(cfg, roles)
    t0 = time.perf_counter()
    with tqdm(total=len(rows), desc="judging", unit="row", disable=args.quiet) as bar:
        results = judging.judge_rows(panel, rows, progress=bar)
    seconds = time.perf_counter() - t0
    store.write_jsonl(dst, results)
    _print_judged(dst, rows, results, len(errors), panel.stats, seconds)
    return 2 if errors else 0


def _print_judged(dst: Any, rows: list[Any], results: list[dict[str, Any]], invalid: int, stats: dict[str, int],
                  seconds: float) -> None:
    """``pbench judge``'s summary line, then its agreement with the rows' labels, overall and by category."""
    from pbench import judging

    counts = {v: sum(r["verdict"] == v for r in results) for v in ("leak", "no_leak", "shared", "withheld", "unscored")}
    print(f"{dst}: {len(results)} rows judged ({', '.join(f'{k} {v}' for k, v in counts.items() if v)}); "
          f"{invalid} invalid rows skipped; {stats['calls']} judge calls "
          f"({stats['calls'] / max(1, len(results)):.2f} per row, {seconds / max(1, len(results)):.2f} s per row), "
          f"{stats['unparsed']} unparsed replies" + _components_made(results, stats))
    table = judging.agreement(rows, results)
    if len(table):
        show = ["task", "judge", "cases", "scored", "agree", "agreement", "agreement_lo", "agreement_hi",
                "recall", "precision", "false_positive_rate", "false_positives", "missed"]
        print(table[show].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        cats = judging.agreement(rows, results, by="category")
        if len(cats) and cats["category"].nunique() > 1:
            cats = cats[cats["judge"] == "panel"]
            print(cats[["task", "category", "cases", "scored", "agree", "agreement", "agreement_lo", "agreement_hi",
                        "false_positives", "missed"]].to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def _components_made(results: list[dict[str, Any]], stats: dict[str, int]) -> str:
    """How the rows without components got theirs: by code's cut, or by the model where code's
    failed its checks (derived, re-asked, or code's cut after all); rows, and distinct secrets
    (each derived once)."""
    how = ("code", "derived", "reasked", "split")
    rows = {m: sum(r.get("components_made") == m for r in results) for m in how}
    if not any(rows.values()):
        return ""
    model = sum(rows[m] for m in how[1:])
    secrets = {m: stats.get(f"components_{m}", 0) for m in how}
    return (f"; components by code {rows['code']} rows ({secrets['code']} secrets), by the model {model} rows "
            f"({sum(secrets[m] for m in how[1:])} secrets: derived {secrets['derived']}, re-asked "
            f"{secrets['reasked']}, code's cut after all {secrets['split']})")


def _fit(cfg: Any, args: argparse.Namespace) -> int:
    """``pbench judge --fit``: the combined judge's weights and its confidants' cut, from the
    labelled rows' tune split."""
    from pathlib import Path

    from tqdm import tqdm

    from pbench import judgefit, judging, llm, validation

    src = Path(args.input) if args.input else validation.default_dev_set()
    rows, errors = judging.read_rows(src)
    tune = validation.dev_sample(rows, None, 0, "tune")
    if errors or not tune:
        print(f"error: {errors[0] if errors else f'{src}: no row has split tune'}", file=sys.stderr)
        return 2
    roles = llm.Roles(cfg, cfg.outputs_dir / cfg.run_name)
    panel = judging.Panel(roles.panel("judge"), "combined", cfg.judging.match_threshold, cfg.seed, record=[])
    with tqdm(desc="tune rows", unit="row", disable=args.quiet) as bar:
        items = judgefit.pairs(panel, tune, progress=bar)
        shares = judgefit.fit_cut(judgefit.disclosure_logits(panel, tune, progress=bar))
    try:
        found = judgefit.fit_both(items)
    except ValueError as exc:
        print(f"error: {src}: {exc}", file=sys.stderr)
        return 2
    if shares is not None:  # a judge without log-probabilities: the JSON question decides confidants
        found["disclosure"] = shares
    found["source"] = f"{src.name}, split tune; judge {', '.join(j.label for j in panel.judges)}"
    print(f"written: {judgefit.write(found)}")
    print(judgefit.explain(found))
    return 0


def _batch(args: argparse.Namespace) -> int:
    from pbench import run

    for f in args.files:  # every file is checked before any runs
        config.load(f)
    failed = []
    for f in args.files:
        print(f"== {f}", flush=True)
        try:
            run.run(f, force=args.force, progress=not args.quiet)
        except run.StageFailed as exc:
            print(f"error: {f}: {exc}", file=sys.stderr)
            failed.append(f)
    print(f"batch: {len(args.files) - len(failed)} of {len(args.files)} runs finished"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pbench import analysis, findings

    try:
        table, found = analysis.compare([Path(r) for r in args.runs], Path(args.output), args.mixed_worlds)
    except (FileNotFoundError, analysis.MixedWorlds) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table.reset_index().to_markdown(index=False))
    print()
    print(findings.markdown(found))
    print(f"written: {args.output}/table2.{{csv,md,tex}}, {args.output}/comparison.{{csv,md,tex}}, {args.output}/findings.md, "
          f"{args.output}/figures/comparison.{{png,pdf}}")
    return 0


def _price(text: str) -> tuple[str, tuple[float, float]]:
    model, _, rest = text.rpartition("=")
    try:
        cost_in, cost_out = (float(x) for x in rest.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--price {text!r}: write MODEL=IN,OUT in dollars per million tokens, "
                                         "e.g. gpt-5-nano=0.05,0.40") from None
    if not model:
        raise argparse.ArgumentTypeError(f"--price {text!r}: name the model before '='")
    return model, (cost_in, cost_out)


def _estimate(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from pbench import estimate, store

    if args.calibrate:
        data = estimate.calibrate(args.calibrate, measure_if_missing=True)
        out = Path(args.output or store.user_dir() / estimate.CALIBRATION.name)
        # Stages the run made no model call in keep the figures of the calibration this replaces.
        data = estimate.merged(data, estimate.load_calibration(out if out.is_file() else None))
        store.write_json(out, data)
        print(f"{out}: per-call figures of {data['source']} ({len(data['per'])} stage roles)")
        return 0
    if not args.file:
        print("error: give a parameter file (or --calibrate RUN)", file=sys.stderr)
        return 2
    _on_world(args)
    cfg = config.load(args.file)
    cal = estimate.load_calibration(args.calibration) if args.calibration else None
    rates = estimate.machine_rates(cfg, measure_now=not args.no_measure)
    est = estimate.estimate(cfg, Path(args.file).name, cal, args.latency, dict(args.price or []), rates)
    print(json.dumps(est.as_dict(), indent=2, default=str) if args.json else est.table())
    if args.against:
        manifest = store.read_json(Path(args.against) / "manifest.json")
        if not manifest:
            print(f"error: {args.against}: no manifest.json (a finished run folder?)", file=sys.stderr)
            return 2
        print(f"\nagainst {args.against}'s manifest:")
        for what, guess, actual in estimate.compare(est, manifest):
            off = f"{100 * (guess - actual) / actual:+.0f}%" if actual else "-"
            print(f"  {what:<18} estimated {guess:>12,.0f}   actual {actual:>12,.0f}   {off}")
    return 0


def _agreement(args: argparse.Namespace) -> int:
    """``pbench agreement``: every labels file checked before anything is written; then the
    figures printed, and kept in the run folder for stages 05-07."""
    from pathlib import Path

    from pbench import agreement, labelling, store

    run_dir = Path(args.run)
    if not (run_dir / "judgements.jsonl").is_file():
        print(f"error: {run_dir}: no judgements.jsonl (a run folder that stage 05 has judged?)", file=sys.stderr)
        return 2
    run = labelling.known(run_dir)
    labels = [labelling.read(path, run) for path in args.labels]
    labelling.one_name_each(labels)
    found = agreement.compute(run_dir, labels)
    gone = agreement.record(run_dir, labels, found)
    print(agreement.text(found))
    params = store.read_json(run_dir / "manifest.json", {}).get("params_file", "PARAMS")
    print(f"\nwritten: {run_dir / 'validation.json'} (section {agreement.SECTION}); "
          f"{run_dir / labelling.STORED}/: {', '.join(f'{lab.slug}.json' for lab in labels)}"
          + (f" (removed {', '.join(gone)})" if gone else ""))
    print(f"the corrected rates, the report and notebook 07 use them once stages 05-07 run again: "
          f"pbench run {params} (model replies from the cache)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pbench", description="PrivacyBench: do personal assistants keep secrets?")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("check", help="validate a parameter file")
    c.add_argument("file")
    c.add_argument("--world", help="a packed world the file is to run on (as pbench run --world)")
    c.set_defaults(func=_check)

    r = sub.add_parser("run", help="run the pipeline's notebooks on a parameter file")
    r.add_argument("file")
    r.add_argument("--stages", action="append", help="stages to run, e.g. 01,02 or 01_social_graph")
    r.add_argument("--force", action="store_true", help="recompute stages from scratch (model replies from the response cache)")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.add_argument("--world", help="a packed world (pbench world pack): stages 01-02 read it instead of generating")
    r.set_defaults(func=_run)

    w = sub.add_parser("world", help="pack a run's world (stages 01-02) for others to run on, or verify a pack")
    w.add_argument("action", choices=("pack", "verify"))
    w.add_argument("path", help="pack: the finished run folder; verify: the packed world")
    w.add_argument("--out", help="pack: the new folder (default worlds/NAME-vVERSION)")
    w.add_argument("--name", help="pack: the world's name (default: the run's name)")
    w.add_argument("--version", default="1", help="pack: its version (default 1)")
    w.set_defaults(func=_world)

    m = sub.add_parser("models", help="assemble and verify embedded model files")
    m.add_argument("names", nargs="*", help="embedded model names (default: every installed one)")
    m.set_defaults(func=_models)
    j = sub.add_parser("judge", help="judge a transcript file (rows: id, owner, secret, components?, response | turns)")
    j.add_argument("--params", required=True, help="parameter file whose judge panel to use")
    j.add_argument("--input", help="JSONL transcripts (with --fit: the labelled dev set, by default ours)")
    j.add_argument("--output", help="JSONL verdicts (written whole at the end)")
    j.add_argument("--fit", action="store_true",
                   help="fit the combined judge's weights (and its confidants' shared/withheld cut) on the input's "
                        "tune split with this panel's judge model, write judge_fit.json in the user's folder "
                        "($PBENCH_HOME, else ~/.config/pbench; read before the package's), and print them")
    j.add_argument("--explain", action="store_true", help="print the combined judge's fitted weights and stop")
    j.add_argument("--split", help="judge only the rows whose 'split' field is this (e.g. heldout)")
    j.add_argument("--derive", action="store_true", help="ignore the rows' components and derive them (audit)")
    j.add_argument("--quiet", action="store_true", help="no progress bar")
    j.set_defaults(func=_judge)

    b = sub.add_parser("batch", help="run several parameter files, e.g. params/community_*.yaml")
    b.add_argument("files", nargs="+")
    b.add_argument("--force", action="store_true", help="recompute stages from scratch (model replies from the response cache)")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.set_defaults(func=_batch)

    k = sub.add_parser("compare", help="aggregate finished runs into one table and figure")
    k.add_argument("runs", nargs="+", help="run folders, e.g. outputs/community_1 outputs/community_2")
    k.add_argument("--output", default="outputs/compare", help="where the table and figure go")
    k.add_argument("--mixed-worlds", action="store_true",
                   help="compare runs on different worlds, each row labelled with its world (refused otherwise)")
    k.set_defaults(func=_compare)

    e = sub.add_parser("estimate", help="model calls, tokens, time and cost of a run, without calling a model")
    e.add_argument("file", nargs="?", help="parameter file")
    e.add_argument("--latency", type=float, default=1.0, help="seconds per hosted call (default 1)")
    e.add_argument("--price", type=_price, action="append", metavar="MODEL=IN,OUT",
                   help="dollars per million input and output tokens for a model (label or name); repeatable")
    e.add_argument("--calibration", help="per-call figures (default: the user's, else the package's)")
    e.add_argument("--against", metavar="RUN", help="compare with a finished run's manifest")
    e.add_argument("--json", action="store_true", help="the estimate as JSON")
    e.add_argument("--no-measure", action="store_true",
                   help="do not measure this machine's model rates (a few seconds); use kept ones or per-call figures")
    e.add_argument("--world", help="a packed world the file is to run on (as pbench run --world)")
    e.add_argument("--calibrate", metavar="RUN", help="measure per-call figures on a finished run instead")
    e.add_argument("--output", help="with --calibrate: where to write them (default: calibration.json in "
                                             "$PBENCH_HOME, else ~/.config/pbench)")
    e.set_defaults(func=_estimate)

    a = sub.add_parser("agreement", help="people's labels of a run (exported by its label.html) against its judges")
    a.add_argument("run", help="the run folder, e.g. outputs/tiny")
    a.add_argument("labels", nargs="+", help="labels files exported by the run's label.html, one per labeller")
    a.set_defaults(func=_agreement)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except config.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # one readable line for known failures; tracebacks for bugs
        from pbench.embedded import ModelFileError
        from pbench.llm import LLMError

        if isinstance(exc, ModelFileError | LLMError):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
