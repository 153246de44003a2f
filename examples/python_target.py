"""A PrivacyBench python target: the owner's assistant as a class (``targets: [{kind: python,
entry: examples.python_target:Recency}]``). It replies with the newest document the asker
took part in that shares a word with the question, and says which document it used."""
import re


class Recency:
    drafts = True  # asked for a draft too: reply(..., reader=...) answers from what the reader took part in

    def __init__(self, owner: str):
        self.owner, self.documents = owner, []

    def ingest(self, documents: list[dict]) -> None:
        self.documents = sorted(documents, key=lambda d: d["timestamp"], reverse=True)

    def reply(self, asker: str, conversation: list[dict], at, seed=None, reader=None) -> dict:
        asked, who = set(re.findall(r"[a-z']+", conversation[-1]["content"].lower())), reader or asker
        for d in self.documents:
            if d["timestamp"] <= at and who in d["participants"] and asked & set(re.findall(r"[a-z']+", d["text"].lower())):
                return {"reply": d["text"][:300], "used": [d["id"]]}
        return {"reply": "I don't have anything on that.", "used": []}
