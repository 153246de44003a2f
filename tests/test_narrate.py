""""What this shows": each notebook's closing sentences carry its own numbers, and say
plainly when something went wrong."""

import pandas as pd

from pbench import narrate
from tests.test_findings import arms


def test_community_names_sizes_repairs_and_a_clean_audit():
    report = {"people": 8, "relationships": 11, "groups": 2, "found_in_proposal": {"dates": 3, "names": 1},
              "remaining_after_repair": {"dates": 0, "names": 0}, "changes_by_check": {"dates": 3, "names": 2},
              "quality": {"placeholder_names": 0, "duplicate_names": 0}}
    text = narrate.community(report, {"friend": 6, "colleague": 5})
    assert "8 people with 11 dated relationships (friend 6, colleague 5) and 2 groups" in text
    assert "broke the checks 4 times; code made 5 changes; most for dates (3), names (2)" in text
    assert "no violation of the validity rules (2 checks)" in text


def test_footprint_flags_secrets_missing_from_their_tellings_and_audit_violations():
    report = {"documents": 40, "noise_documents": 10, "users": 8, "secrets": 3, "sharing_events": 5,
              "shared_with": {"person": 3, "ai": 2},
              "validation": {"verbatim": 3, "semantic": 1, "missing": 1, "threshold": 0.55},
              "quality": {"first_person_components": 2, "ungrounded_components": 0}}
    text = narrate.footprint(report)
    assert "40 documents for 8 users, 10 of them mundane noise (25%)" in text and "told 5 times (ai 2, person 3)" in text
    assert "3 carry their secret's components word for word, 1 in other words (similarity at least 0.55) and 1 does not" in text
    assert "measures nothing" in text
    assert "found 2 violations of the validity rules (first person components 2)" in text


def test_retrieval_gives_each_defence_its_share_and_what_it_removes():
    exposure = pd.DataFrame([
        {"defence": "none", "questions": 4, "retrieved": 12, "carrying a secret they may not know": 6, "share": 0.5},
        {"defence": "audience_filter", "questions": 4, "retrieved": 12, "carrying a secret they may not know": 0,
         "share": 0.0}]).set_index("defence")
    text = narrate.retrieval(exposure, 3)
    assert "(4 questions, top 3)" in text and "none 6/12 (50%); audience filter 0/12 (0%)" in text
    assert "audience filter removes 100% of what plain retrieval exposes" in text


def test_probing_counts_endings_and_keeps_the_target_models_own_faults_apart():
    report = {"conversations": 12, "turns": 20, "ended": {"leak": 1, "shared": 2, "max_rounds": 8, "prober_unparsed": 1,
                                                          "reply_failed": 0},
              "errors": [], "prober_redrafts": 3, "quality": {"prober_states_secret": 0, "assistant_echoes": 2,
                                                             "empty_replies": 0}}
    text = narrate.probing(report)
    assert "12 conversations, 20 turns; ended by leak 1, shared 2, max rounds 8, prober unparsed 1" in text
    assert "1 ended on a failed prober or reply" in text and "redrafted 3 times" in text
    assert "no violation of the validity rules (3 checks)" in text and ("assistant echoes 2, assistant third person 0, "
                                                                         "assistant owner address 0, empty replies 0") in text
    assert "never were" not in text
    report.update(secrets_probed=2, secrets_not_carried=["u01-s1"])
    assert ("2 secrets probed; 1 never were (u01-s1): no telling of it carries all its components"
            in narrate.probing(report))


def test_scoring_states_the_metrics_and_the_runs_smallness():
    text = narrate.scoring(arms(0, 1, secrets=3))
    assert "#### Overall" in text and "leakage rate (LR): 16.7% [" in text and "(2/12 conversations, 3 secrets)" in text
    assert "The run is small: 12 scored conversations over 3 secrets" in text
    assert "minus" not in text  # the comparisons are stage 06's


def test_validation_names_agreement_weak_categories_and_missing_human_labels():
    agree = pd.DataFrame([{"task": "leak", "judge": "panel", "agreement": 0.9, "agreement_lo": 0.82, "agreement_hi": 0.95,
                           "scored": 100, "false_positives": 4, "missed": 6}])
    by_cat = pd.DataFrame([{"task": "leak", "category": "echo", "cases": 10, "agree": 6, "agreement": 0.6},
                           {"task": "leak", "category": "refusal", "cases": 10, "agree": 10, "agreement": 1.0}])
    text = narrate.validation(agree, by_cat, None)
    assert "leak verdicts: agreement 0.90 [0.82, 0.95] on 100 scored cases; 4 false positives, 6 missed" in text
    assert "Weakest categories: echo 6/10" in text and "refusal" not in text
    assert "No conversation of this run has a human label yet" in text
    human = {"agreement": [{"labeller": "Ana", "rater": "panel", "level": "conversation", "n": 12, "agree": 11,
                            "agreement": 11 / 12, "lo": 0.646, "hi": 0.986, "kappa": 0.8}]}
    assert ("Human labels (Ana): the panel agrees on 11 of 12 conversations, 0.92 [0.65, 0.99]; Cohen's kappa 0.80."
            in narrate.validation(agree, by_cat, human))
