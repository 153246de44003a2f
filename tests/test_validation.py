"""Stage 07 helpers: dev-set sampling, confusion counts, Cohen's kappa and the C.1 snippets
(people's labels of a run: tests/test_labelling.py)."""

import math

import pytest

from pbench import judging, validation
from tests.test_rag import dataset  # noqa: F401  (the hand-made dataset fixture)
from tests.test_social_graph import community  # noqa: F401


CATEGORIES = {"full", "paraphrase", "partial", "hint", "refusal", "unrelated", "confirmation", "negative", "denial",
              "echo", "secrecy_clause", "someone_else", "confidant",
              "number_words", "generic", "harmless_yes", "yeah_echo",
              "draft_leak", "draft_partial", "draft_hint", "draft_generic", "draft_invented",
              "pretext_leak", "pretext_confirmation", "pretext_deflect", "pretext_partial",
              "polarity_opposite", "polarity_hedged", "polarity_someone_else", "polarity_control"}


def test_dev_set_is_well_formed_and_balanced():
    rows, errors = judging.read_rows(validation.default_dev_set())
    assert not errors and len(rows) >= 200 and len({r.id for r in rows}) == len(rows)
    cats, splits_of_secret, cats_in_split = {}, {}, {"tune": set(), "heldout": set()}
    for r in rows:
        extra = r.model_extra
        assert len(extra["components_revealed"]) == len(r.components), r.id
        if r.authorised:  # a confidant: shared or withheld, never leak/no_leak
            assert extra["label"] in ("shared", "withheld") and extra["category"] == "confidant", r.id
        else:
            assert extra["label"] == ("leak" if all(extra["components_revealed"]) else "no_leak"), r.id
        assert extra["split"] in cats_in_split, r.id
        cats[extra["category"]] = cats.get(extra["category"], 0) + 1
        cats_in_split[extra["split"]].add(extra["category"])
        splits_of_secret.setdefault(r.secret, set()).add(extra["split"])
    assert set(cats) == CATEGORIES
    assert {r.model_extra["label"] for r in rows} == {"leak", "no_leak", "shared", "withheld"}
    assert all(len(s) == 1 for s in splits_of_secret.values())  # split by secret: none in both
    assert cats_in_split["tune"] == cats_in_split["heldout"] == CATEGORIES
    assert min(sum(r.model_extra["split"] == s for r in rows) for s in cats_in_split) >= 0.4 * len(rows)
    n = len(CATEGORIES)
    sample = validation.dev_sample(rows, 2 * n, seed=1)
    assert len(sample) == 2 * n and {r.model_extra["category"] for r in sample} == CATEGORIES  # 2 per category
    assert validation.dev_sample(rows, 2 * n, seed=1) == sample and validation.dev_sample(rows, None, 1) == rows
    held = validation.dev_sample(rows, n, seed=1, split="heldout")
    assert len(held) == n and {r.model_extra["split"] for r in held} == {"heldout"}
    assert {r.model_extra["category"] for r in held} == CATEGORIES


def test_the_demo_measures_its_judge_on_every_held_out_case_and_the_live_test_on_two_a_category():
    from pbench import config, run

    cfg = config.load(run.repo_root() / "params" / "tiny.yaml")
    every = validation.dev_rows(cfg.validation, cfg.seed)
    assert (len(every), sum(r.authorised for r in every)) == (209, 16)  # 16 confidants: 14 judge calls
    some = validation.dev_rows(cfg.validation.model_copy(update={"dev_cases": 60}), cfg.seed)  # the live test's
    assert (len(some), sum(r.authorised for r in some)) == (59, 2)
    assert {r.model_extra["label"] for r in some if r.authorised} == {"shared", "withheld"}


def test_dev_set_families_are_split_by_secret_with_leaks_and_non_leaks_on_both_sides():
    rows, _ = judging.read_rows(validation.default_dev_set())
    family_of_secret: dict[str, set[str]] = {}
    counts: dict[tuple[str, str, str], int] = {}
    for r in rows:
        fam = validation.family(r)
        assert fam in validation.FAMILIES, r.id
        family_of_secret.setdefault(r.secret, set()).add(fam)
        key = (fam, r.model_extra["split"], r.model_extra["label"])
        counts[key] = counts.get(key, 0) + 1
        if fam != "chat":  # drafts and pretexts are judged leak / no_leak, never as confidants
            prefix = "draft_" if fam == "delegation" else "pretext_"
            assert not r.authorised and r.model_extra["category"].startswith(prefix), r.id
    assert all(len(f) == 1 for f in family_of_secret.values())  # a secret's rows are all of one family
    for fam in ("delegation", "pretext"):
        assert sum(f == {fam} for f in family_of_secret.values()) >= 6, fam
        for split in ("tune", "heldout"):  # enough on each side to correct a rate (correction.MIN_FAMILY_CASES)
            leaks, others = counts.get((fam, split, "leak"), 0), counts.get((fam, split, "no_leak"), 0)
            assert leaks >= 5 and others >= 5 and leaks + others >= 10, (fam, split)


def _results(rows, flip=()):
    """A panel that agrees with every label but those of the rows ``flip`` names."""
    swap = {"leak": "no_leak", "no_leak": "leak", "shared": "withheld", "withheld": "shared"}
    return [{"verdict": swap[r.model_extra["label"]] if r.id in flip else r.model_extra["label"], "judges": {},
             "components_revealed": []} for r in rows]


def test_agreement_per_family_counts_each_family_apart():
    rows, _ = judging.read_rows(validation.default_dev_set())
    held = validation.dev_sample(rows, None, 0, "heldout")
    draft_leak = next(r.id for r in held if validation.family(r) == "delegation" and r.model_extra["label"] == "leak")
    deflect = next(r.id for r in held if r.model_extra["category"] == "pretext_deflect")
    table = validation.by_family(held, _results(held, {draft_leak, deflect}))
    leak = table[(table["task"] == "leak") & (table["judge"] == "panel")].set_index("family")
    assert list(leak.index) == ["chat", "delegation", "pretext"]  # FAMILIES order, rows without one are chat
    n = {f: sum(validation.family(r) == f and r.model_extra["label"] in ("leak", "no_leak") for r in held)
         for f in validation.FAMILIES}
    assert dict(leak["cases"]) == n
    assert leak.loc["chat", "agreement"] == 1.0 and leak.loc["chat", "missed"] == 0
    assert (leak.loc["delegation", "missed"], leak.loc["delegation", "false_positives"]) == (1, 0)
    assert (leak.loc["pretext", "missed"], leak.loc["pretext", "false_positives"]) == (0, 1)
    assert leak.loc["delegation", "agree"] == n["delegation"] - 1
    confidants = table[table["task"] == "disclosure"]
    assert set(confidants["family"]) == {"chat"}  # confidants are chat replies only
    only_chat = [r for r in held if validation.family(r) == "chat"]
    assert set(validation.by_family(only_chat, _results(only_chat))["family"]) == {"chat"}


def test_confusion_and_kappa_by_hand():
    c = validation.confusion(["leak", "leak", "no_leak", "no_leak", "leak"], ["leak", "no_leak", "leak", "no_leak", "unscored"])
    assert (c["tp"], c["fn"], c["fp"], c["tn"], c["unscored"]) == (1, 1, 1, 1, 1)
    assert c["precision"] == c["recall"] == c["f1"] == 0.5
    # 10 items, agreement 0.8, chance 0.5 -> kappa 0.6
    a = ["leak"] * 5 + ["no_leak"] * 5
    b = ["leak"] * 4 + ["no_leak"] + ["leak"] + ["no_leak"] * 4
    assert validation.cohen_kappa(a, b) == pytest.approx(0.6)
    assert math.isnan(validation.cohen_kappa(["leak"] * 3, ["leak"] * 3))


def test_snippets_pair_secret_documents_with_ordinary_ones(dataset):  # noqa: F811
    rows = validation.snippet_rows(dataset, 4, seed=0)
    labels = [r.model_extra["label"] for r in rows]
    assert labels.count("leak") == 2 and labels.count("no_leak") == 2
    for r in rows:
        doc = dataset.by_id[r.id.split(":")[0]]
        assert (r.model_extra["label"] == "leak") == bool(doc.secret_ids)
