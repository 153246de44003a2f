"""How an append to a run's record file scales with the file's size: ``store.append_jsonl``
of conversation-sized records (8 KB), one record per call as stages 04 and 05 append them.

    python bench/appends.py [--records 4000] [--size 8192] [--window 300]

Prints the seconds of the first and the last ``window`` appends and their ratio. Target (issue
17): the last 300 of 4,000 cost at most 2x the first 300. Each append takes the file's lock,
cuts a torn last line (reading only the file's tail) and fsyncs, so the time is mostly the
disk's fsync. Writes only a temporary folder.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from pbench import store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--size", type=int, default=8192, help="bytes per record")
    ap.add_argument("--window", type=int, default=300, help="appends timed at the start and at the end")
    args = ap.parse_args()
    seconds: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "conversations.jsonl"
        for i in range(args.records):
            record = {"id": f"c{i:06d}", "text": "x" * args.size}
            t0 = time.perf_counter()
            store.append_jsonl(path, [record])
            seconds.append(time.perf_counter() - t0)
        size = path.stat().st_size
    first, last = sum(seconds[: args.window]), sum(seconds[-args.window:])
    print(f"{args.records} appends of {args.size} B records; file {size / 2**20:.1f} MiB; total {sum(seconds):.2f} s")
    print(f"first {args.window}: {first:.3f} s   last {args.window}: {last:.3f} s   last/first: {last / first:.2f}x")


if __name__ == "__main__":
    main()
