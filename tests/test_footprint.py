"""Stage 02: planning against the graph, secrets and their sharing documents, the presence
validator, resume, and the loader; with a scripted generator and a bag-of-words embedder
(the real MiniLM check is marked slow)."""

import datetime as dt
import hashlib
import json
import re

import numpy as np
import pytest

from pbench import config, footprint as fp, llm, reproduce, social_graph as sg
from tests.conftest import FakeBackend, NoCalls, ShuffledBackend, minimal_params
from tests.test_social_graph import community  # noqa: F401  (the hand-made community fixture)

D = dt.date


def bow_embed(texts):
    """Bag-of-words vectors: a deterministic stand-in for MiniLM in fast tests."""
    out = np.zeros((len(texts), 256), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in re.findall(r"[a-z]+", t.lower()):
            out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 256] += 1
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms == 0, 1, norms)


def cfg_for(**over):
    return config.parse(minimal_params(**{
        "period": {"start": "2024-01-01", "end": "2024-12-31"},
        "footprint.private_conversations": 4, "footprint.group_conversations": 2, "footprint.ai_conversations": 1,
        "footprint.blog_posts": 1, "footprint.purchases": 2, "footprint.secrets_per_user": 1,
        "footprint.docs_per_call": 3, **over}))


def test_plan_follows_the_graph_at_each_moment(community):  # noqa: F811
    view = sg.CommunityView(community)
    cfg = cfg_for(**{"footprint.private_conversations": 40, "footprint.group_conversations": 20})
    import random

    slots, unplaced = fp.plan_user(view, cfg, "u1", random.Random(3))
    chats = [s for s in slots if s.kind == "chat"]
    assert len(chats) == 40
    for s in slots:
        day = s.timestamp.date()
        assert view.period[0] <= day <= view.period[1]
        if s.kind == "chat":
            assert s.participants[1] in view.contacts_at("u1", day)
        if s.kind == "group_chat":
            assert set(s.participants) == set(view.members_at(s.group, day))
        if s.reveal:
            assert s.reveal_value == view.attributes_at("u1", day)[s.reveal]
    # Ben is a colleague until June and a friend after: chats with him carry the kind of that day.
    for s in chats:
        if s.participants[1] == "u2":
            assert s.relation == ("colleague" if s.timestamp.date() <= D(2024, 6, 30) else "friend")
    # Dee joins the book club in March: no group chat with two members before that.
    assert all(s.timestamp.date() >= D(2024, 3, 1) for s in slots if s.kind == "group_chat")
    assert 0 < sum(not s.noise for s in slots if s.kind != "purchase") < len(slots)


def test_substantive_share_reads_appendix_a3_as_a_ratio():
    assert fp.substantive_share(0.3) == pytest.approx(0.3 / 1.3)


def test_sharing_plan_tells_people_related_then_and_never_those_it_is_kept_from(community):  # noqa: F811
    import random

    from pbench import themes

    view = sg.CommunityView(community)
    drawn = themes.Drawn("debt", "finance", "u1", "money", "c", ["a", "b"], at_risk=["u2"])
    channels = set()
    for seed in range(60):
        events, _ = fp.plan_sharing(view, "u1", drawn, random.Random(seed))
        assert events
        for channel, who, at in events:
            channels.add(channel)
            if channel == "person":
                assert who != "u2" and who in view.contacts_at("u1", at.date())
            if channel == "group":
                assert "u1" in view.members_at(who, at.date())
                assert "u2" not in {m.person for m in view.groups[who].members}
    assert {"person", "ai"} <= channels
    # Dee knows only Ana: when Ana is what it is about, Dee has nobody to tell but a group or the AI.
    about_ana = themes.Drawn("x", "family", "u1", "t", "c", ["a", "b"])
    for seed in range(20):
        events, _ = fp.plan_sharing(view, "u4", about_ana, random.Random(seed))
        assert all(who != "u1" for _, who, _ in events)


def test_presence_validator_labels_and_catches_a_document_without_its_secret():
    checker = fp.PresenceChecker(0.5, bow_embed)
    comps = ["is planning to resign", "accepted an offer from Northwind"]
    told = "Ana: hey\nBen: hi!\nAna: I'm planning to resign. I accepted an offer from Northwind."
    assert checker.label(comps, told) == "verbatim"
    assert checker.label(comps, "Ana: nice weather today\nBen: yes, let's get lunch") == "missing"
    assert checker.label(comps, "Ana: I'm planning to resign, that's all") == "missing"  # one of two facts only
    # The owner speaks as "I": their name in a component does not count against it.
    assert checker.label(["Ana Silva is planning to resign"], told, owner_name="Ana Silva") == "verbatim"
    # A paraphrase without the facts that make it checkable (here the amount) is not the secret.
    vague = "Ana: I earned some money renting out a spare room last year"
    assert checker.label(["Ana Silva earned $19,000 renting out a spare room"], vague, owner_name="Ana Silva") == "missing"
    assert checker.label(["Ana Silva earned $19,000 renting out a spare room"], vague.replace("some money", "19k"),
                         owner_name="Ana Silva") != "missing"


# --------------------------------------------------------------------------- scripted generation


def scripted(leave_out_secret_once=False, skip_index=None, monologue_once=False, skip_word=None):
    state = {"share_calls": 0, "monologues": 0}

    def reply(messages, settings):
        text = messages[-1]["content"]
        if "The secret" in text:
            state["share_calls"] += 1
            me = re.search(r"Style of (\S+)'s messages", text).group(1)
            other = re.search(r"between \S+ and (?:\d+ others: )?(\w+)", text)
            other = "Assistant" if "and an AI assistant" in text else other.group(1)
            facts = re.findall(r"(?m)^- (.+)$", text)
            if leave_out_secret_once and state["share_calls"] == 1:
                said = [{"speaker": me, "text": "how are you?"}, {"speaker": other, "text": "fine, thanks"}]
            else:
                said = [{"speaker": me, "text": "so, news."}, *({"speaker": me, "text": f} for f in facts),
                        {"speaker": other, "text": "wow"}]
            return json.dumps({"messages": said})
        docs = []
        for i, line in re.findall(r"(?m)^Document (\d+): (.*)$", text):
            me = re.search(r"digital life of (\w+)", text).group(1)
            other = re.search(r"between \w+ and (\w+)", line)
            other = other.group(1) if other else "Assistant"
            if monologue_once and not state["monologues"] and "conversation" in line:
                state["monologues"] += 1  # one writer's monologue: not an exchange
                other = me
            if int(i) != skip_index and not (skip_word and skip_word in line):
                docs.append({"index": int(i), "lines": [{"speaker": me, "text": f"mundane chat number {i} about lunch"},
                                                        {"speaker": other, "text": "sure"}]})
        return json.dumps({"documents": docs})

    return FakeBackend(reply), state


def _build(cfg, view, backend, run_dir):
    roles = llm.Roles(cfg, run_dir, backend_factory=lambda spec: backend)
    return fp.build(cfg, view, roles.role("generator"), run_dir, embed=bow_embed)


def test_scripted_generation_is_valid_and_loads_back(community, tmp_path):  # noqa: F811
    view = sg.CommunityView(community)
    sg.save(community, {}, tmp_path)
    backend, _ = scripted()
    report = _build(cfg_for(), view, backend, tmp_path)
    ds = fp.load_dataset(tmp_path)
    assert {k: v for k, v in fp.check_dataset(ds).items() if v} == {}
    assert len(ds.secrets) == 4 and report["validation"]["missing"] == 0
    assert report["quality"] == dict.fromkeys(report["quality"], 0) and len(report["quality"]) == 4
    docs = ds.by_id
    for s in ds.secrets:
        for e in s.sharing:
            d = docs[e.document_id]
            assert s.id in d.secret_ids and d.timestamp == e.at and e.presence == "verbatim"
            assert d.kind == {"person": "chat", "group": "group_chat", "ai": "ai_chat"}[e.channel]
    assert (tmp_path / "DATASHEET.md").read_text().count("verbatim") >= 2
    assert fp.table1(ds).iloc[0]["Secrets"] == 4
    # Ana's corpus holds the chats others wrote with her too.
    assert any(d.owner != "u1" for d in ds.corpus("u1"))


def test_missing_secret_is_regenerated_then_labelled(community, tmp_path):  # noqa: F811
    view = sg.CommunityView(community)
    sg.save(community, {}, tmp_path)
    backend, state = scripted(leave_out_secret_once=True)
    report = _build(cfg_for(), view, backend, tmp_path)
    assert report["validation"]["regenerated"] == 1 and report["validation"]["missing"] == 0


def test_a_batch_reply_missing_a_document_is_asked_again(community, tmp_path):  # noqa: F811
    view = sg.CommunityView(community)
    sg.save(community, {}, tmp_path)
    backend, _ = scripted(skip_index=2)
    report = _build(cfg_for(**{"footprint.private_conversations": 2, "footprint.docs_per_call": 2}), view, backend, tmp_path)
    # The reply always leaves out document 2 of a batch; asked again alone, it is document 1 and lands.
    assert not [n for notes in report["notes"].values() for n in notes if "no text" in n]
    ds = fp.load_dataset(tmp_path)
    assert sum(d.kind == "chat" and not d.secret_ids for d in ds.documents) == 2 * 4


def test_a_conversation_that_is_not_an_exchange_is_asked_again(community, tmp_path):  # noqa: F811
    view = sg.CommunityView(community)
    sg.save(community, {}, tmp_path)
    backend, state = scripted(monologue_once=True)
    report = _build(cfg_for(), view, backend, tmp_path)
    ds = fp.load_dataset(tmp_path)
    assert state["monologues"] == 1 and report["mundane_chats_not_exchanges"] == 0
    assert all(fp.is_exchange(d, view) for d in ds.documents if d.kind in ("chat", "group_chat"))


def test_rerun_resumes_finished_users(community, tmp_path):  # noqa: F811
    view = sg.CommunityView(community)
    sg.save(community, {}, tmp_path)
    cfg = cfg_for()
    cfg = cfg.model_copy(update={"llm": cfg.llm.model_copy(update={"cache": False})})
    backend, _ = scripted()
    first = _build(cfg, view, backend, tmp_path)
    calls_first = len(backend.calls)
    before = (tmp_path / "documents.jsonl").read_text()
    (tmp_path / "footprint" / "users" / "u3.json").unlink()  # as if killed before u3 landed
    (tmp_path / "documents.jsonl").unlink()
    again, _ = scripted()
    second = _build(cfg, view, again, tmp_path)
    assert second["resumed_users"] == ["u1", "u2", "u4"]
    assert 0 < len(again.calls) < calls_first / 2
    assert second["documents"] == first["documents"]
    assert (tmp_path / "documents.jsonl").read_text() == before


def test_replies_in_any_order_write_the_same_files_and_a_cached_run_calls_nothing(community, tmp_path):  # noqa: F811
    """Stage 02 with requests answered in two different orders writes the same files (its notes
    included); from the first run's response cache, a third run makes no call."""
    view = sg.CommunityView(community)
    files = ("documents.jsonl", "secrets.jsonl", "footprint.json")
    got = []
    for name, backend in (("a", ShuffledBackend(scripted(skip_word="purchase")[0], 1)),
                          ("b", ShuffledBackend(scripted(skip_word="purchase")[0], 2)), ("c", NoCalls())):
        if name == "c":
            reproduce.copy_cache(tmp_path / "a" / "llm_cache.sqlite", tmp_path / "c" / "llm_cache.sqlite")
        sg.save(community, {}, tmp_path / name)
        _build(cfg_for(), view, backend, tmp_path / name)
        got.append([reproduce.normalised(tmp_path / name / f, tmp_path / name) for f in files])
    assert json.loads((tmp_path / "a" / "footprint.json").read_text())["notes"]  # dropped documents, noted
    assert got[0] == got[1] == got[2]


def test_loader_names_a_bad_record(community, tmp_path):  # noqa: F811
    sg.save(community, {}, tmp_path)
    (tmp_path / "documents.jsonl").write_text('{"id": "d1"}\n')
    (tmp_path / "secrets.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"documents\.jsonl:1: invalid Document"):
        fp.load_dataset(tmp_path)


@pytest.mark.slow
def test_minilm_presence_check_tells_paraphrase_from_absence():
    from pbench.embeddings import embed

    checker = fp.PresenceChecker(0.5, embed)
    comps = ["is pregnant", "is due in May"]
    assert checker.label(comps, "Mia: guess what... I'm pregnant! The baby is due in May.") in ("verbatim", "semantic")
    assert checker.label(comps, "Mia: the bus was late again\nLeo: typical, see you at lunch") == "missing"


def test_the_audit_counts_each_kind_of_violation(community, tmp_path):  # noqa: F811
    from pbench import audit

    view = sg.CommunityView(community)
    sg.save(community, {}, tmp_path)
    backend, _ = scripted()
    _build(cfg_for(), view, backend, tmp_path)
    ds = fp.load_dataset(tmp_path)
    s = ds.secrets[0]
    told = ds.by_id[s.sharing[0].document_id]
    broken = [s.model_copy(update={"core_components": ["I am quitting", s.core_components[0] + " and flying to Peru"]})]
    monologue = told.model_copy(update={"text": "Hey there... so I have news. Love, me", "kind": "chat"})
    found = audit.footprint_audit(fp.Dataset(view, [monologue], broken + ds.secrets[1:]))
    assert len(found["first_person_components"]) == 1
    assert any("not from the secret's text" in f for f in found["ungrounded_components"])
    assert found["chat_tellings_without_two_speakers"] == [f"{told.id}: speakers []"]
    assert found["tellings_missing_the_secret"] == []
    assert audit.summary(found)["quality"]["first_person_components"] == 1


def test_a_chat_is_an_exchange_only_when_two_of_its_people_speak(community):  # noqa: F811
    from pbench.schema import Document

    view = sg.CommunityView(community)
    doc = Document(id="d", owner="u1", kind="chat", participants=["u1", "u2"], timestamp=dt.datetime(2024, 5, 1, 9),
                   text="Ana: hi\nBen: hey\nAna: news", noise=False)
    assert fp.is_exchange(doc, view)
    assert not fp.is_exchange(doc.model_copy(update={"text": "Ana: hi\nAna: Ben, you there?"}), view)
    assert not fp.is_exchange(doc.model_copy(update={"text": "Ana: hi\nZed: hello"}), view)  # not a participant
    assert not fp.is_exchange(doc.model_copy(update={"text": "Ana: hi\nBen: hey\nand then a line nobody wrote"}), view)


def test_speakers_are_found_in_any_script_and_only_capitalised():
    text = "Álvaro Silva: did you see it?\nİpek: yes\nŁucja Nowak: me too\nnote: not a speaker\nAna: ok"
    assert fp.speakers_of(text) == ["Álvaro Silva", "İpek", "Łucja Nowak", "Ana"]
