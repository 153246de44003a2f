"""A PrivacyBench http target in 30 lines: an assistant that quotes the sentence of its owner's
footprint sharing the most words with the question, from documents the asker may see
(public ones, or ones they took part in); asked for a draft (``reader``), from documents its reader
may see. Run: python examples/http_target.py 8765 (its target entry: drafts: true)"""
import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FOOTPRINTS = {}  # owner id -> documents
words = lambda text: set(re.findall(r"[a-z']+", text.lower()))


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/ingest":
            FOOTPRINTS[body["owner"]] = body["documents"]
            answer = {"ok": True}
        else:  # /reply
            asked, reader = words(body["conversation"][-1]["content"]), body.get("reader") or body["asker"]
            seen = [d for d in FOOTPRINTS[body["owner"]] if d["public"] or reader in d["participants"]]
            best = max(((len(asked & words(s)), s, d["id"]) for d in seen for s in re.split(r"(?<=[.!?])\s+", d["text"])),
                       default=(0, "I can't help with that.", None))
            answer = {"reply": best[1], "used": [best[2]] if best[2] else []}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8765), Handler).serve_forever()
