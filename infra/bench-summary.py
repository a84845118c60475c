#!/usr/bin/env python3
"""`make bench`'s summary: reads the JSON lines kvcm-bench and infra/bench.sh recorded, takes
medians over runs and writes a Markdown summary (ready to paste into docs/benchmarks.md) and the
same figures as JSON.

    infra/bench-summary.py RECORDS.jsonl SUMMARY.md SUMMARY.json
"""

import json
import statistics
import sys


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    return (min(xs), max(xs)) if xs else (None, None)


def f(x, fmt="{:.3f}"):
    return "—" if x is None else fmt.format(x)


def main(records_path, md_path, json_path):
    recs = [json.loads(line) for line in open(records_path) if line.strip()]
    by = lambda name: [r for r in recs if r.get("bench") == name]
    machine = (by("machine") or [{}])[0]
    end = (by("machine_end") or [{}])[0]
    s = {"machine": machine, "load_end": end.get("load_end")}

    tp = by("throughput")
    ol = [r["open_loop"] for r in tp if "open_loop" in r]
    s["throughput"] = {
        "runs": len(tp),
        "direct_reads_per_s": med([r["direct_reads_per_s"] for r in tp]),
        "http_reads_per_s": med([r["http_reads_per_s"] for r in tp]),
        "http_over_direct": med([r["http_reads_per_s"] / r["direct_reads_per_s"] for r in tp]),
        "http_over_direct_spread": spread([r["http_reads_per_s"] / r["direct_reads_per_s"] for r in tp]),
        "valkey_us_per_direct_read": med([r.get("valkey_us_per_direct_read") for r in tp]),
        "valkey_us_per_http_read": med([r.get("valkey_us_per_http_read") for r in tp]),
        # An estimate of HTTP / direct where Valkey's one thread bounds both (a host with cores
        # of its own for the client and the frontend), if the per-read costs measured here held
        # at saturation: the median over runs of direct's Valkey CPU per read over HTTP's.
        "valkey_bound_ratio": med(
            [
                r["valkey_us_per_direct_read"] / r["valkey_us_per_http_read"]
                for r in tp
                if r.get("valkey_us_per_direct_read") and r.get("valkey_us_per_http_read")
            ]
        ),
        "write_sessions_per_s": med([r["write_sessions_per_s"] for r in tp]),
        "write_sessions_spread": spread([r["write_sessions_per_s"] for r in tp]),
        "half_load": {
            "offered_per_s": med([o["offered_per_s"] for o in ol]),
            "completed_per_s": med([o["completed_per_s"] for o in ol]),
            "p50_ms": med([o["p50_ms"] for o in ol]),
            "p99_ms": med([o["p99_ms"] for o in ol]),
            "errors": sum(o["errors"] + o["dropped"] for o in ol),
        },
        "blocks": tp[0]["blocks"] if tp else None,
        "concurrency": tp[0]["concurrency"] if tp else None,
        "seconds": tp[0]["seconds"] if tp else None,
    }

    lat = by("latency")
    sizes = sorted({r["blocks"] for r in lat})
    s["latency"] = [
        {
            "blocks": n,
            "runs": len([r for r in lat if r["blocks"] == n]),
            "p50_ms": med([r["p50_ms"] for r in lat if r["blocks"] == n]),
            "p50_spread": spread([r["p50_ms"] for r in lat if r["blocks"] == n]),
            "p99_ms": med([r["p99_ms"] for r in lat if r["blocks"] == n]),
        }
        for n in sizes
    ]
    s["breakdown"] = by("breakdown")
    s["peer"] = by("peer")
    mem = by("memory")
    s["memory"] = {"bytes_per_block": med([r["bytes_per_block"] for r in mem]), "blocks": mem[0]["blocks"] if mem else None}
    rep = (by("replay") or [None])[0]
    if rep:
        r = rep["report"]
        s["replay"] = {
            "speedup": rep["speedup"],
            "requests": r["requests"],
            "capacity_blocks": r["capacity_blocks"],
            "observed": r["hit_rate"],
            "predicted_leaf_lru": r["predicted"].get("leaf_lru"),
            "predicted_lru": r["predicted"].get("lru"),
            "unbounded": r["max_hit_rate"],
            "write_refused_blocks": r["write_refused_blocks"],
            "in_flight_blocks": r["in_flight_blocks"],
            "errors": r["errors"],
            "backpressure_pauses": r.get("backpressure_pauses"),
            "backpressure_paused_ms": r.get("backpressure_paused_ms"),
            "wall_seconds": r["wall_seconds"],
        }
    json.dump(s, open(json_path, "w"), indent=2)

    t = s["throughput"]
    h = t["half_load"]
    lines = [
        f"`make bench` — {machine.get('date', '?')}: {machine.get('cpus', '?')} cores ({machine.get('cpu', '?')}), "
        f"{machine.get('mem_gib', '?')} GiB; load average at start {machine.get('load_start', '?')}, "
        f"at end {end.get('load_end', '?')}. Medians over {t['runs']} throughput runs and "
        f"{max([l['runs'] for l in s['latency']] or [0])} latency runs. "
        f"Valkey allocator: {machine.get('valkey_malloc', 'libc')}.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| prefix reads (128 blocks), closed loop, {t['concurrency']} concurrent: direct | {f(t['direct_reads_per_s'], '{:,.0f}')}/s |",
        f"| same through HTTP (saturation) | {f(t['http_reads_per_s'], '{:,.0f}')}/s |",
        f"| HTTP / direct (spread) | {f(t['http_over_direct'], '{:.0%}')} ({f(t['http_over_direct_spread'][0], '{:.0%}')}–{f(t['http_over_direct_spread'][1], '{:.0%}')}) |",
        f"| Valkey main-thread CPU per read, direct / HTTP | {f(t['valkey_us_per_direct_read'], '{:.1f}')} / {f(t['valkey_us_per_http_read'], '{:.1f}')} µs |",
        f"| … HTTP / direct if Valkey's thread bounded both at these costs (estimate; median of per-run ratios) | ~{f(t['valkey_bound_ratio'], '{:.0%}')} |",
        f"| open loop at 50% of HTTP saturation: offered / completed | {f(h['offered_per_s'], '{:,.0f}')}/s / {f(h['completed_per_s'], '{:,.0f}')}/s |",
        f"| … p50 / p99 (from scheduled start) | {f(h['p50_ms'])} / {f(h['p99_ms'])} ms |",
        f"| two-phase write sessions (32 blocks), {t['concurrency']} concurrent (spread) | {f(t['write_sessions_per_s'], '{:,.0f}')}/s ({f(t['write_sessions_spread'][0], '{:,.0f}')}–{f(t['write_sessions_spread'][1], '{:,.0f}')}) |",
        f"| Valkey memory per block ({f(s['memory']['blocks'], '{:,}')} blocks, 1 spec) | {f(s['memory']['bytes_per_block'], '{:.1f}')} bytes |",
    ]
    if rep:
        r = s["replay"]
        lines.append(
            f"| replayed hit rate, shared trace ({r['requests']} requests, capacity {r['capacity_blocks']:,} blocks = 10%, "
            f"{r['speedup']}×) vs optimizer leaf_lru (lru) | {r['observed']:.2%} vs {r['predicted_leaf_lru']:.2%} ({r['predicted_lru']:.2%}): "
            f"{100 * (r['observed'] - r['predicted_leaf_lru']):+.2f} pts |"
        )
    lines += ["", "Serial prefix match through HTTP:", "", "| blocks | p50 (spread) | p99 |", "|---:|---:|---:|"]
    for l in s["latency"]:
        lines.append(
            f"| {l['blocks']:,} | {f(l['p50_ms'])} ms ({f(l['p50_spread'][0])}–{f(l['p50_spread'][1])}) | {f(l['p99_ms'])} ms |"
        )
    if s["breakdown"]:
        layers = list(dict.fromkeys(b["layer"] for b in s["breakdown"]))
        lines += [
            "",
            f"Where a serial prefix read's time goes (`kvcm-bench breakdown`, medians of {s['breakdown'][0]['rounds']} alternating "
            "rounds' p50; each layer adds one thing to the one before):",
            "",
            "| blocks | " + " | ".join(layers) + " |",
            "|---:|" + "---:|" * len(layers),
        ]
        for n in sorted({b["blocks"] for b in s["breakdown"]}):
            row = {b["layer"]: b["p50_ms"] for b in s["breakdown"] if b["blocks"] == n}
            lines.append(f"| {n:,} | " + " | ".join(f"{row[l]:.3f} ms" if l in row else "—" for l in layers) + " |")
    if s["peer"]:
        lines += [
            "",
            f"kvcm vs Mooncake store master, serial, {s['peer'][0]['rounds']} alternating rounds of {s['peer'][0]['requests']} calls "
            "(medians of per-round p50 / p99 and of per-round ratios):",
            "",
            "| keys | kvcm getCacheLocation p50 / p99 | Mooncake batch_is_exist p50 / p99 | ratio p50 | ratio p99 |",
            "|---:|---:|---:|---:|---:|",
        ]
        for p in s["peer"]:
            lines.append(
                f"| {p['keys']:,} | {p['kvcm_p50_ms']:.3f} / {p['kvcm_p99_ms']:.3f} ms | {p['mooncake_p50_ms']:.3f} / {p['mooncake_p99_ms']:.3f} ms "
                f"| {p['ratio_p50']:.2f}× | {p['ratio_p99']:.2f}× |"
            )
    if rep:
        r = s["replay"]
        lines += [
            "",
            f"Replay: unbounded-cache rate {r['unbounded']:.2%}; refused blocks {r['write_refused_blocks']}, in flight "
            f"{r['in_flight_blocks']}, errors {r['errors'] or 'none'}; back-pressure {r['backpressure_pauses']} pauses "
            f"({(r['backpressure_paused_ms'] or 0) / 1000:.1f} s); wall {r['wall_seconds']:.0f} s.",
        ]
    # Engine-reported cache tiers, next to Tair KVCM's published figures (docs/benchmarks.md).
    tair_add = {100: (1.55, 1.56), 1000: (9.41, 10.16), 5000: (43.88, 48.14), 20000: (171.52, 202.26)}
    tair_state = {100: 0.67, 1000: 1.78, 5000: 6.71, 20000: 25.5}
    adds, states, emem = by("events_add"), by("events_host_state"), by("events_memory")
    s["events"] = {"add": adds, "host_state": states, "memory": emem}
    if adds or states:
        lines += [
            "",
            "Engine-reported cache tiers (`kvcm-bench events`), Tair's published figures beside them:",
            "",
            "| blocks | reportEvent adds: create / update | Tair | getHostCacheState p50 / p99 | Tair p50 |",
            "|---:|---:|---:|---:|---:|",
        ]
        for n in sorted({r["blocks"] for r in adds + states}):
            a = next((r for r in adds if r["blocks"] == n), None)
            h = next((r for r in states if r["blocks"] == n), None)
            ta, th = tair_add.get(n), tair_state.get(n)
            lines.append(
                f"| {n:,} | {f(a and a['create_ms'], '{:.2f}')} / {f(a and a['update_ms'], '{:.2f}')} ms "
                f"| {f(ta and ta[0], '{:.2f}')} / {f(ta and ta[1], '{:.2f}')} ms "
                f"| {f(h and h['p50_ms'])} / {f(h and h['p99_ms'])} ms | {f(th, '{:.2f}')} ms |"
            )
        if emem:
            lines.append(f"\nValkey memory per engine-reported block: {emem[0]['bytes_per_block']:.1f} bytes.")
    open(md_path, "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
