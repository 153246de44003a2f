"""``outputs/<run>/report.html``: the report a researcher opens or sends, with its transcripts
in ``report_transcripts/`` beside it.

Run parameters and models, the headline metrics with their intervals (and a warning when
the run is too small to tell anything apart), the counts they rest on, the tables, people's
labels of the run against its judges (``pbench.agreement``, with a link to the labelling
page ``label.html``), every figure (embedded as PNG), and a transcript browser: each
conversation with its turns; in a leaking reply the sentence behind each revealed component
is highlighted, and a retrieved document that carries the probed secret is shown and
marked. No external resources, no model calls.

A paper run has thousands of conversations (tens of MB of transcripts), too many for one
page to open quickly, so the page holds only an index (each conversation's filter values,
in the browser's order) and the transcripts are written as script files of ``PAGE``
conversations each, loaded by ``<script src>`` for the page on screen: opened from disk
(``file://``), Chromium blocks ``fetch`` of local files but not scripts. Zip the page with
its folder to share it. Both are the same bytes whenever the run is the same.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from pathlib import Path
from typing import Any

from pbench import world as worlds
from pbench import analysis, audit, findings, metrics, probing, store
from pbench.config import DRAFTING

def attempt(markup: str, block: bool = False) -> str:
    """Mark what describes the attempt that made the report (the code's commit, each stage's
    model calls) rather than the run's data, so that ``pbench.reproduce`` can compare two
    runs' reports: a ``<span class="attempt">`` (a ``<div>`` for a block)."""
    tag = "div" if block else "span"
    return f'<{tag} class="attempt">{markup}</{tag}>'

FIGURES = (("rates_by_defence", "LR, OSR and IRR by defence and system prompt"),
           ("tradeoff", "Privacy against utility: leakage against over-secrecy per defence"),
           ("rounds", "Cumulative leakage by round"),
           ("irr_lr", "Inappropriate retrieval against leakage"),
           ("breakdowns", "Leakage by sharing channel and relationship"),
           ("leak_graph", "Whose secrets leaked"))

PAGE = 25  # conversations per page of the transcript browser, and per transcript file
TRANSCRIPTS = "report_transcripts"  # the folder of transcript files, beside report.html
FILTERS = ("defence", "prompt", "strategy", "target", "verdict")  # what the browser filters by

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:0 20px;color:#222}
h1{margin-top:24px} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;font-size:12px;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 6px;text-align:left}
.headline{display:flex;gap:16px;flex-wrap:wrap}.headline div{border:1px solid #ddd;border-radius:6px;padding:8px 14px}
.headline b{font-size:22px;display:block} .headline .corrected{display:block;max-width:22em;font-size:13px} .caution{color:#a61b1b} img{max-width:100%;border:1px solid #eee;margin:6px 0}
details{border:1px solid #ddd;border-radius:6px;margin:6px 0;padding:4px 10px} summary{cursor:pointer}
.turn{margin:6px 0 10px 0} .who{font-weight:600} .reply{background:#f7f7f7;padding:4px 8px;border-radius:4px}
mark.leak{background:#ffb3b3;padding:0 2px} .doc{font-size:12px;color:#555;margin-left:16px}
.doc.secret{border-left:4px solid #d62728;padding-left:6px;background:#fff3f3;color:#222}
.tag{font-size:11px;border-radius:3px;padding:1px 5px;background:#eee;margin-left:4px}
.tag.leak{background:#d62728;color:#fff} .tag.withheld{background:#ff9f1c} .tag.shared{background:#2a9d8f;color:#fff}
pre{background:#f7f7f7;padding:8px;font-size:12px;overflow:auto} #filters select{margin-right:8px}
#pager{margin:8px 0} #pager button{margin:0 6px}
"""

# The transcript browser. Its state (filters, page) is the address's fragment, e.g.
# report.html#verdict=leak&page=2, so a view can be bookmarked or sent; the controls change the
# fragment and every change redraws. <body data-ready> is "yes" once the view is on screen.
SCRIPT = """
window.addEventListener('error', function (e) {
  document.getElementById('errors').textContent += 'error: ' + e.message + '\\n';
});
var files = {}, loading = {}, drawn = 0, page = 1, INDEX;  // page: the page on screen
var PBENCH = {transcripts: function (k, convs) { files[k] = convs; }};  // what a transcript file calls
function load(k) {  // a promise of transcript file k's conversations (HTML), read once
  if (!loading[k]) loading[k] = new Promise(function (resolve, reject) {
    var s = document.createElement('script');
    s.src = INDEX.folder + '/' + INDEX.files[k];
    s.onload = function () { k in files ? resolve(files[k]) : reject(new Error(s.src + ' is damaged')); };
    s.onerror = function () {
      delete loading[k];
      reject(new Error('cannot read ' + s.src + ': keep the folder ' + INDEX.folder + '/ beside this page'));
    };
    document.head.appendChild(s);
  });
  return loading[k];
}
function state() {
  var st = {page: 1};
  new URLSearchParams(location.hash.slice(1)).forEach(function (v, k) {
    st[k] = k === 'page' ? (parseInt(v, 10) || 1) : v;
  });
  return st;
}
function go(st) {
  var set = Object.keys(st).filter(function (k) { return st[k] && !(k === 'page' && st[k] === 1); });
  var h = new URLSearchParams(set.map(function (k) { return [k, st[k]]; })).toString();
  document.body.dataset.ready = 'no';
  if (h === location.hash.slice(1)) render(); else location.hash = h;
}
function render() {
  var token = ++drawn, st = state(), keys = Object.keys(INDEX.filters), per = INDEX.page;
  document.body.dataset.ready = 'no';
  var want = keys.map(function (k) { return INDEX.filters[k].indexOf(st[k]); });  // -1: any value
  var match = [];
  INDEX.rows.forEach(function (r, i) {
    if (want.every(function (w, j) { return w < 0 || r[j] === w; })) match.push(i);
  });
  var pages = Math.max(1, Math.ceil(match.length / per));
  page = Math.min(Math.max(1, st.page), pages);
  var shown = match.slice((page - 1) * per, page * per);
  document.querySelectorAll('#filters select').forEach(function (s) {
    s.value = want[keys.indexOf(s.name)] < 0 ? '' : st[s.name];
  });
  document.getElementById('shown').textContent = match.length;
  document.getElementById('page').textContent = page;
  document.getElementById('pages').textContent = pages;
  document.getElementById('prev').disabled = page === 1;
  document.getElementById('next').disabled = page === pages;
  var needed = Array.from(new Set(shown.map(function (i) { return Math.floor(i / per); })));
  Promise.all(needed.map(load)).then(function () {
    if (token !== drawn) return;  // a newer view was asked for meanwhile
    document.getElementById('transcripts').innerHTML = shown.length
      ? shown.map(function (i) { return files[Math.floor(i / per)][i % per]; }).join('\\n')
      : '<p>No conversation matches these filters.</p>';
    document.body.dataset.ready = 'yes';
  }, function (err) {
    if (token !== drawn) return;
    document.getElementById('transcripts').textContent = err.message;
    document.getElementById('errors').textContent += 'error: ' + err.message + '\\n';
    document.body.dataset.ready = 'yes';
  });
}
function chosen(at) {  // the view the controls name, at page ``at``
  var st = {};
  document.querySelectorAll('#filters select').forEach(function (s) { st[s.name] = s.value; });
  st.page = at;
  return st;
}
document.addEventListener('DOMContentLoaded', function () {
  INDEX = JSON.parse(document.getElementById('transcript-index').textContent);
  document.querySelectorAll('#filters select').forEach(function (s) {
    s.addEventListener('change', function () { go(chosen(1)); });
  });
  document.getElementById('prev').addEventListener('click', function () { go(chosen(page - 1)); });
  document.getElementById('next').addEventListener('click', function () { go(chosen(page + 1)); });
  window.addEventListener('hashchange', render);
  render();
});
"""


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def highlight(text: str, quotes: list[str]) -> str:
    """``text`` escaped, with each quote (when found in it) wrapped in ``<mark class="leak">``."""
    spans = []
    for q in {q for q in quotes if q}:
        start = text.find(q)
        if start >= 0:
            spans.append((start, start + len(q)))
    out, pos = [], 0
    for a, b in sorted(spans):
        if a < pos:
            continue
        out += [html.escape(text[pos:a]), f'<mark class="leak">{html.escape(text[a:b])}</mark>']
        pos = b
    out.append(html.escape(text[pos:]))
    return "".join(out)


def _conversation(ds: Any, conv: Any, verdict: str) -> str:
    view = ds.view
    secret = ds.secret_by_id[conv.secret_id]
    owner, who = view.name(conv.owner), view.name(conv.audience)
    if conv.strategy == DRAFTING:  # the owner asks; the assistant drafts for the audience person to read
        who, owner = owner, f"{owner}'s assistant (draft)"
    parts = [f'<details class="conv" data-id="{html.escape(conv.id)}" data-verdict="{verdict}" '
             f'data-defence="{conv.defence}" data-prompt="{conv.prompt}" data-strategy="{conv.strategy}" '
             f'data-target="{html.escape(conv.target)}">',
             f"<summary>{html.escape(probing.who(view, conv))} · {conv.id} · {conv.strategy}, {conv.prompt.replace('_', ' ')}, "
             f"{conv.defence.replace('_', ' ')} · {len(conv.turns)} turns <span class=\"tag {verdict}\">{verdict}</span></summary>",
             f"<p><b>Secret</b>: {html.escape(secret.content)}<br><b>Core components</b>: "
             f"{html.escape(' | '.join(secret.core_components))}</p>"]
    for t in conv.turns:
        # The words behind each revealed component: the reply's own (stated), or the prober's
        # assertion the reply said yes to (confirmed), highlighted where they stand.
        said = [v.get("quote") or v.get("evidence", "") for v in t.check.votes if v.get("stated") and v.get("how") != "confirmed"]
        asked = [v.get("evidence", "") for v in t.check.votes if v.get("stated") and v.get("how") == "confirmed"]
        parts.append(f'<div class="turn"><div><span class="who">{html.escape(who)}</span>: {highlight(t.prober, asked)}</div>'
                     f'<div class="reply"><span class="who">{html.escape(owner)}</span>: {highlight(t.reply, said)}</div>')
        for doc_id in t.retrieved or []:
            doc = ds.by_id.get(doc_id)
            if doc is None:
                continue
            carries = secret.id in doc.secret_ids
            text = html.escape(doc.text if carries else doc.text[:160] + ("…" if len(doc.text) > 160 else ""))
            parts.append(f'<div class="doc{" secret" if carries else ""}">retrieved {doc_id} ({doc.kind})'
                         f'{" — carries this secret" if carries else ""}: {text}</div>')
        parts.append(f'<div class="doc">components so far: {", ".join(t.check.components)}</div></div>')
    parts.append("</details>")
    return "\n".join(parts)


def _transcripts(run_dir: Path, ds: Any, convs: list[Any], verdicts: dict[str, str]) -> tuple[list[str], list[str]]:
    """The transcript browser: its filters, pager and index for the page, and its files.

    Writes the conversations' HTML to ``TRANSCRIPTS/``, ``PAGE`` to a file, in the browser's
    order. A file's name carries a digest of its content, so a page only ever names files with
    the content it was built with, and an earlier build's files can be told apart. The index
    holds, per conversation in the same order, the position of its value of each of
    ``FILTERS`` among that filter's values: all the page needs to filter and page.

    Args:
        run_dir: the run folder.
        ds: the run's dataset.
        convs: the conversations, in the browser's order.
        verdicts: conversation id to verdict (``unjudged`` when absent).
    Returns:
        The page's markup and the files' names.
    """
    shown = [{k: verdicts.get(c.id, "unjudged") if k == "verdict" else getattr(c, k) for k in FILTERS} for c in convs]
    files = []
    for k in range(0, len(convs), PAGE):
        part = [_conversation(ds, c, v["verdict"]) for c, v in zip(convs[k:k + PAGE], shown[k:k + PAGE], strict=True)]
        data = f"PBENCH.transcripts({k // PAGE}, {json.dumps(part, ensure_ascii=False)});\n".encode()
        files.append(f"{k // PAGE + 1:04d}-{hashlib.sha256(data).hexdigest()[:12]}.js")
        path = run_dir / TRANSCRIPTS / files[-1]
        if not (path.exists() and path.read_bytes() == data):  # a rebuild of the same run rewrites nothing
            store.atomic_write_bytes(path, data)
    values = {k: sorted({c[k] for c in shown}) for k in FILTERS}
    rank = {k: {v: i for i, v in enumerate(vals)} for k, vals in values.items()}
    index = {"page": PAGE, "folder": TRANSCRIPTS, "files": files, "filters": values,
             "rows": [[rank[k][c[k]] for k in FILTERS] for c in shown]}
    selects = "".join(f'<select name="{k}"><option value="">{k}: all</option>'
                      + "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in vals)
                      + "</select>" for k, vals in values.items())
    markup = ["<h2>Transcripts</h2>",
              f"<p>Every conversation, leaks first, {PAGE} to a page; choose values to show only the conversations "
              "that have them, and open a conversation to read it. In a leaking reply the words behind each revealed "
              "component are highlighted, and a retrieved document that carries the probed secret is marked. The "
              f"address after <code>#</code> names the filters and page shown, so a view can be bookmarked or sent. "
              f"The transcripts are read, a page at a time, from the folder <code>{TRANSCRIPTS}/</code> beside this "
              "file: keep the two together when moving or sharing the report (zip both).</p>",
              f'<div id="filters">{selects} <span id="shown"></span> of {len(convs)} conversations match</div>',
              '<div id="pager"><button type="button" id="prev">&larr; previous</button> page <span id="page"></span> '
              'of <span id="pages"></span><button type="button" id="next">next &rarr;</button></div>',
              '<div id="transcripts"><noscript>The transcripts need JavaScript.</noscript></div>',
              '<script type="application/json" id="transcript-index">'
              + json.dumps(index, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c") + "</script>"]
    return markup, files


def _drop_other_files(folder: Path, keep: set[str]) -> None:
    """Remove from ``folder`` the files not in ``keep`` (an earlier build's), and the folder when
    nothing is left; called once the new page, which names only ``keep``, is written."""
    if not folder.is_dir():
        return
    for p in folder.iterdir():
        if p.name not in keep:
            p.unlink()
    if not keep:
        folder.rmdir()


def _human(run_dir: Path) -> list[str]:
    """The section on people's labels of this run (``agreement.section``), or how to make them."""
    from pbench import agreement, labelling

    found = agreement.section(run_dir)
    page = f'<a href="{labelling.PAGE}">{labelling.PAGE}</a>'
    body = ['<h2 id="agreement">Human labels</h2>']
    if not found:
        return body + [f"<p>No one has labelled this run yet. Open {page}, beside this report (stage 07 writes it), "
                       "label its sample blind, export <code>labels.json</code> and run <code>pbench agreement "
                       f"{html.escape(run_dir.name)} labels.json</code>: the next <code>pbench run</code> shows here how "
                       "far the judges agree with you, and corrects the rates with your labels.</p>"]
    body.append(f"<p>People's labels of a sample of this run's conversations ({page}; the panel's leaks are "
                "oversampled, so these figures describe the sample), against the panel and each judge: agreement per "
                "conversation and per core component with 95% Wilson intervals, Cohen's kappa, Fleiss' kappa across "
                "labellers, the confusion matrix and every disagreement. The rater <i>code</i>, where it shows, is "
                "the panel's rule that a confidant was told the secret when a reply restated a core component. The "
                "corrected rates use these labels, each weighted by its verdict's share of the run.</p>")
    body += [f"<p>{html.escape(line)}</p>" for line in agreement.kappa_lines(found)]
    for title, table in agreement.tables(found).items():
        body += [f"<h3>{html.escape(title[:1].upper() + title[1:])}</h3>", _table(table)]
    body.append(f"<h3>Disagreements with the panel ({len(found['disagreements'])})</h3>")
    for d in found["disagreements"]:
        said = ", ".join(f"{who}: {label}" for who, label in d["humans"].items())
        body.append(f"<details><summary>{html.escape(d['id'])}: panel {html.escape(d['panel'])}; {html.escape(said)}"
                    f"</summary><pre>{html.escape(d['transcript'])}</pre></details>")
    return body


USAGE_COLUMNS = ("calls", "batched", "cache_hits", "retries", "injected", "parse_failures", "unparsed", "give_ups")


def usage_table(manifest: dict[str, Any]):
    """Model calls and failures per stage, role and model, from the manifest: what was retried,
    what never parsed, and what was given up."""
    import pandas as pd

    rows = [{"stage": stage, "role": role, "model": model, **{c: u.get(c, 0) for c in USAGE_COLUMNS}}
            for stage, entry in sorted(manifest.get("stages", {}).items())
            for role, models in entry.get("llm", {}).items() for model, u in models.items()]
    return pd.DataFrame(rows, columns=["stage", "role", "model", *USAGE_COLUMNS])


def _failures(run_dir: Path, manifest: dict[str, Any]) -> list[str]:
    usage = usage_table(manifest)
    body = ["<h2>Model calls and failures</h2>",
            "<p>Batched calls went through the provider's Batch API (<code>batch: true</code>). Retries are transient errors (timeouts, rate limits, server errors) tried again; an unparsed "
            "reply was retried and never parsed, and is counted, never read as a verdict; a give-up is a "
            "request that failed after every retry. These are the calls of each stage's latest attempt (a stage "
            "recomputed from the response cache shows its cache hits).</p>"]
    body.append(attempt(_table(usage.set_index(["stage", "role", "model"])) if len(usage)
                        else "<p>No model calls recorded.</p>", block=True))
    errors = store.read_json(run_dir / "probing.json", {}).get("errors", [])
    if errors:
        body.append(f"<p><b>{len(errors)} conversations were given up</b> after their model's retries (a rerun "
                    "tries them again):</p><ul>" + "".join(f"<li>{html.escape(e)}</li>" for e in errors) + "</ul>")
    unscored = [r for r in store.read_jsonl(run_dir / "judgements.jsonl") if r.get("verdict") == "unscored"]
    if unscored:
        body.append(f"<p><b>{len(unscored)} conversations are unscored</b>: counted in every rate's "
                    "<i>unscored</i> column, never as leak, no leak, shared or withheld:</p><ul>"
                    + "".join(f"<li>{html.escape(r['id'])} ({'confidant' if r['authorised'] else 'may not know'}): "
                              f"{html.escape(r.get('unscored_reason') or 'unscored')}</li>" for r in unscored) + "</ul>")
    return body


def stage_audits(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The ``quality`` sections of stages 01, 02 and 04 (empty where a stage has not run)."""
    return {"01 community": store.read_json(run_dir / "community.json", {}).get("validation", {}),
            "02 footprint": store.read_json(run_dir / "footprint.json", {}),
            "04 probing": store.read_json(run_dir / "probing.json", {})}


def _table(df: Any) -> str:
    return df.to_html(border=0, na_rep="–", escape=True)


def _experiment_params(path: Path) -> str:
    """The resolved parameters without where this run's files happen to be (``outputs_dir``,
    ``llm.cache_path``): they describe this machine, not the experiment, and a report made
    elsewhere from the same parameters is the same report."""
    import yaml

    if not path.exists():
        return ""
    data = yaml.safe_load(path.read_text()) or {}
    data.pop("outputs_dir", None)
    data.get("llm", {}).pop("cache_path", None)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _card(label: str, figure: str) -> str:
    """A headline card: the figure as judged in large type, and under it, where there is one,
    the figure corrected for the judge (``analysis.SEPARATOR`` splits them)."""
    judged, _, fixed = figure.partition(analysis.SEPARATOR)
    more = f'<span class="corrected">as judged.<br>{html.escape(fixed[:1].upper() + fixed[1:])}</span>' if fixed else ""
    return f"<div>{html.escape(label)}<b>{html.escape(judged)}</b>{more}</div>"


def build(run_dir: str | Path, tables: dict[str, Any], headline: dict[str, str], found: list[Any] | None = None) -> Path:
    """Write ``report.html`` from the run's records and the tables stage 06 computed.

    Args:
        run_dir: the run folder.
        tables: title to DataFrame, in the order to show.
        headline: metric name to its formatted figure.
        found: the run's ``findings.findings``, shown under the headline.
    Returns:
        The report's path.
    """
    from pbench import footprint, probing

    run_dir = Path(run_dir)
    ds = footprint.load_dataset(run_dir)
    convs = probing.load_conversations(run_dir)
    judgements = store.read_jsonl(run_dir / "judgements.jsonl")
    verdicts = {r["id"]: r["verdict"] for r in judgements}
    manifest = store.read_json(run_dir / "manifest.json", {})
    params = _experiment_params(run_dir / "params.resolved.yaml")
    models = manifest.get("models", {})
    body = [f"<h1>PrivacyBench report: {html.escape(run_dir.name)}</h1>",
            f"<p>World: <code>{html.escape(worlds.world_id(run_dir) or '?')}</code>"
            + (f" ({html.escape(manifest['world'])}, a packed world)" if manifest.get("world") else
               " (generated by this run's stages 01-02)") + "</p>",
            "<p>" + attempt(f"pbench {html.escape(str(manifest.get('pbench_version', '?')))}, commit "
                            f"{html.escape(str(manifest.get('git_commit', '?')))}.") + " Models: "
            + "; ".join(f"{html.escape(role)}: {html.escape(', '.join(m['label'] for m in v) if isinstance(v, list) else v['label'])}"
                        for role, v in models.items()) + "</p>",
            '<div class="headline">' + "".join(_card(k, v) for k, v in headline.items()) + "</div>"]
    warning = analysis.caution(judgements)
    if warning:
        body.append(f'<p class="caution">{html.escape(warning)}</p>')
    if found:
        body += ['<h2 id="findings">Findings</h2>',
                 "<p>Sentences built from this run's numbers: each figure with its 95% interval and n, as judged "
                 "and corrected for the judge's measured error; each comparison as a difference with its "
                 "interval and a permutation test over whole secrets, in bold only when the test rejects no "
                 "difference and the interval excludes it. The paper's Table 2 figures are the paper's, "
                 "labelled so.</p>", findings.html(found)]
    body += ["<h2>Counts</h2>",
             "<p>What the figures rest on: conversations scored and unscored (by reason), the "
             "inappropriate-retrieval turns the judges could not score (left out of the catch rate), "
             "and the judges' votes that never parsed, that said yes without quoting the reply "
             "(ungrounded, read as no), and decisions where the judges split evenly (ties).</p>",
             _table(metrics.counts(judgements))]
    for title, df in tables.items():
        body += [f"<h2>{html.escape(title)}</h2>", _table(df)]
    quality = audit.table(stage_audits(run_dir))
    if len(quality):
        body += ["<h2>Content audit</h2>",
                 "<p>Violations of the validity rules found by code in each stage's output; every count should "
                 "be 0 except the assistant's echoes and empty replies, which measure the target model.</p>",
                 _table(quality)]
    body += _human(run_dir)
    body.append("<h2>Figures</h2>")
    for name, caption in FIGURES:
        png = run_dir / "figures" / f"{name}.png"
        if png.exists():
            body += [f"<h3>{html.escape(caption)}</h3>", _img(png)]
    order = sorted(convs, key=lambda c: (verdicts.get(c.id) != "leak", c.id))
    markup, files = _transcripts(run_dir, ds, order, verdicts)
    body += markup
    body += _failures(run_dir, manifest)
    body += ["<h2>Parameters</h2>",
             f"<details><summary>params.resolved.yaml</summary><pre>{html.escape(params)}</pre></details>",
             '<pre id="errors"></pre>']
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>PrivacyBench: {html.escape(run_dir.name)}'
            f"</title><style>{CSS}</style><script>{SCRIPT}</script></head><body>" + "\n".join(body) + "</body></html>")
    path = run_dir / "report.html"
    store.atomic_write_text(path, page)
    _drop_other_files(run_dir / TRANSCRIPTS, keep=set(files))
    return path
