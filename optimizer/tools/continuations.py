#!/usr/bin/env python3
"""Which requests of a Mooncake-format trace are continued, and by what an online policy could see.

For each request, its *new* blocks are those after the longest prefix of blocks seen before (an
unbounded cache). Its *turn* is one more than the turn of the request that wrote the deepest of
those seen blocks (1 when it has none but the first). A request is *continued* when any of its
new blocks is accessed again later. Prints, per turn, per length of the new run and per answer
length (output_length), how many requests are continued, and how many requests later the first
reuse comes (docs/optimizer.md, "A recorded conversation trace, not tuned on").

Usage: optimizer/tools/continuations.py TRACE.jsonl
"""
import collections
import json
import statistics
import sys


def bucket(n, bounds):
    """Index of the first bound n is at most, or len(bounds)."""
    return next((i for i, b in enumerate(bounds) if n <= b), len(bounds))


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    accesses = collections.defaultdict(list)
    for i, r in enumerate(rows):
        for h in r["hash_ids"]:
            accesses[h].append(i)
    turn_of = {}  # block -> turn of the request that wrote it
    seen = set()
    by = {name: collections.defaultdict(lambda: [0, 0, []]) for name in ("turn", "new blocks", "output_length")}
    run_bounds, out_bounds = (2, 4, 8, 16, 32, 64), (49, 199, 499)
    for i, r in enumerate(rows):
        ids = r["hash_ids"]
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        new = ids[k:]
        if not new:
            continue
        turn = (turn_of.get(ids[k - 1], 0) if k > 1 else 0) + 1
        for h in new:
            turn_of[h] = turn
            seen.add(h)
        later = [a for h in new for a in accesses[h] if a > i]
        keys = {
            "turn": min(turn, 8),
            "new blocks": bucket(len(new), run_bounds) if turn == 1 else None,
            "output_length": bucket(r["output_length"], out_bounds) if turn == 1 else None,
        }
        for name, key in keys.items():
            if key is None:
                continue
            cell = by[name][key]
            cell[0] += 1
            if later:
                cell[1] += 1
                cell[2].append(min(later) - i)
    labels = {
        "turn": lambda k: f"turn {k}" + ("+" if k == 8 else ""),
        "new blocks": lambda k: "new blocks " + (f"<= {run_bounds[k]}" if k < len(run_bounds) else f"> {run_bounds[-1]}"),
        "output_length": lambda k: "output " + (f"<= {out_bounds[k]}" if k < len(out_bounds) else f"> {out_bounds[-1]}"),
    }
    print(f"{path}: {len(rows)} requests")
    for name, cells in by.items():
        print(f"\nby {name}" + (" (first turns only)" if name != "turn" else "") + ": requests, continued, median gap (requests)")
        for key in sorted(cells):
            n, cont, gaps = cells[key]
            gap = statistics.median(gaps) if gaps else "-"
            print(f"  {labels[name](key):<20} {n:>7} {100 * cont / n:6.1f}%  {gap}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
