"""The Mooncake side of `kvcm-bench peer`: serial `batch_is_exist` calls against a Mooncake store
master, timed here, driven by kvcm-bench over stdin/stdout so the two systems are measured in
alternating rounds of one run.

Start: `python3 mooncake_peer.py --master 127.0.0.1:P --keys N` (with the unzipped wheel on
PYTHONPATH and its libraries on LD_LIBRARY_PATH; infra/install-mooncake.sh). It mounts a small
segment, `put`s N keys of 16 bytes, checks they exist and prints `ready`. Then, per stdin line
`<n> <count>`, it runs `count` serial `batch_is_exist` of the first n keys (every key must
exist) and prints one line of `count` latencies in milliseconds; `quit` ends it.

What a latency includes: the Python binding call (list of str → C++), the client's RPC to the
master over loopback TCP, the master's lookups of n keys, the reply, and the list of ints back in
Python — the peer's whole serial "is this prefix cached" path as a Python engine sees it.
"""

import argparse
import sys
import time

from mooncake.store import MooncakeDistributedStore


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True, help="host:port of mooncake_master's RPC")
    ap.add_argument("--keys", type=int, default=1024)
    a = ap.parse_args()

    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", a.master)
    if rc != 0:
        print(f"error: setup returned {rc}", file=sys.stderr)
        return 1
    keys = [f"kvcm-bench-peer-{i:08d}" for i in range(a.keys)]
    value = b"x" * 16
    for k in keys:
        rc = store.put(k, value)
        if rc != 0:
            print(f"error: put {k} returned {rc}", file=sys.stderr)
            return 1
    if list(store.batch_is_exist(keys)) != [1] * len(keys):
        print("error: not every key exists after put", file=sys.stderr)
        return 1
    print("ready", flush=True)

    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        n, count = int(parts[0]), int(parts[1])
        batch = keys[:n]
        out = []
        for _ in range(count):
            t = time.perf_counter_ns()
            found = store.batch_is_exist(batch)
            out.append((time.perf_counter_ns() - t) / 1e6)
            if len(found) != n or found[0] != 1 or found[-1] != 1:
                print(f"error: batch_is_exist of {n} keys answered {list(found)[:4]}…", file=sys.stderr)
                return 1
        print(" ".join(f"{ms:.4f}" for ms in out), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
