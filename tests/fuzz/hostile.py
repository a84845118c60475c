"""Hostile requests a schema-driven fuzzer will not think of, sent to a running kvcm stack and
checked against the same invariants (kvcm_fuzz.Guard): huge arrays, deep nesting, odd unicode
and invalid UTF-8, int64 edge values as strings, numbers and floats, duplicate keys, unknown enum
names and numbers, path-like and hash-tag-like names, wrong methods and bodies, and malformed
credentials. Every case also asserts the status it must get, so a silently accepted hostile
request fails the run.

    python hostile.py [--rounds N]     (environment: see kvcm_fuzz.py)

Each round sends every case once; later rounds vary the random parts (names, values)."""

import argparse
import http.client
import json
import os
import random
import sys
import urllib.parse

from kvcm_fuzz import Guard

INSTANCE = "fz-inst"  # registered by run.sh, in group "fz" (the meta key's scope)
I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


def rand_name(rng, n=8):
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))


def nested(depth):
    return "[" * depth + "]" * depth


def cases(rng):
    """(plane, method, path, raw body bytes, extra headers, allowed statuses, must be rejected)."""
    out = []

    def meta(rpc, body, allowed=(200, 400), reject=True):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        out.append(("meta", "POST", f"/api/{rpc}", raw, {}, allowed, reject))

    def admin(rpc, body, allowed=(200, 400), reject=True):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        out.append(("admin", "POST", f"/api/{rpc}", raw, {}, allowed, reject))

    # Huge arrays: refused by a bound (INVALID_ARGUMENT) or the body limit (413), never built.
    meta("getCacheLocation", {"instance_id": INSTANCE, "query_type": "QT_BATCH_GET", "block_keys": list(range(100_000))})
    meta("getCacheLocation", {"instance_id": INSTANCE, "query_type": "QT_PREFIX_MATCH", "token_ids": [1] * 1_200_000}, (200, 413))
    meta("startWriteCache", {"instance_id": INSTANCE, "block_keys": list(range(20_000))})
    meta("getCacheMeta", {"instance_id": INSTANCE, "block_keys": [1, 2], "block_mask": {"bool_masks": {"values": [True] * 500_000}}})
    meta("finishWriteCache", {"instance_id": INSTANCE, "write_session_id": "0" * 16,
                              "success_blocks": {"bool_masks": {"values": [True] * 300_000}}})
    meta("getCacheLocation", {"instance_id": INSTANCE, "query_type": "QT_BATCH_GET", "block_keys": [1],
                              "location_spec_names": [rand_name(rng) for _ in range(10_000)]})
    meta("registerInstance", {"instance_group": "fz", "instance_id": rand_name(rng), "block_size": 16,
                              "location_spec_infos": [{"name": f"s{i}", "size": 1} for i in range(10_000)],
                              "model_deployment": {"model_name": "m", "dtype": "d"}})
    meta("registerInstance", {"instance_group": "fz", "instance_id": rand_name(rng), "block_size": 16,
                              "location_spec_infos": [{"name": "tp0", "size": 1}],
                              "location_spec_groups": [{"name": f"g{i}", "spec_names": ["tp0"]} for i in range(1000)],
                              "model_deployment": {"model_name": "m", "dtype": "d"}})
    admin("createInstanceGroup", {"instance_group": {"name": rand_name(rng), "storage_candidates": [rand_name(rng) for _ in range(50_000)]}})
    admin("createApiKey", {"name": "k", "role": "ROLE_USER", "instance_groups": [rand_name(rng) for _ in range(10_000)]})
    # Deep nesting: serde_json's recursion limit, HTTP 400.
    meta("getCacheLocation", b'{"instance_id": ' + nested(5000).encode() + b"}", (400,))
    admin("createInstanceGroup", b'{"instance_group": {"name": "n", "cache_config": {"meta_indexer_config": {"a": '
          + nested(300).encode() + b"}}}}", (400,))
    meta("getCacheLocation", b'{"a":' * 2000 + b"1" + b"}" * 2000, (200, 400))  # unknown fields are skipped, iteratively
    # Odd unicode and bytes.
    for odd in ["\u202eevil", "a\u0000b", "é", "🦀", "\ufeffx", "a\u2028b", "\u00a0"]:
        meta("getInstanceInfo", {"instance_id": odd})
        admin("addStorage", {"storage": {"global_unique_name": odd, "nfs": {"root_path": "/tmp/fz"}}})
        meta("registerInstance", {"instance_group": "fz", "instance_id": rand_name(rng), "block_size": 4,
                                  "location_spec_infos": [{"name": odd, "size": 1}],
                                  "model_deployment": {"model_name": "m", "dtype": "d"}})
    meta("getInstanceInfo", b'{"instance_id": "\\ud800"}', (400,))
    meta("getInstanceInfo", b'{"instance_id": "\xff\xfe"}', (400,))
    meta("getInstanceInfo", b'{"instance_id": "a\x01b"}', (400,))
    # int64 edges: as strings, numbers and floats.
    for value in [str(I64_MAX), str(I64_MIN), " 12 "]:
        meta("getCacheLocation", {"instance_id": INSTANCE, "query_type": "QT_BATCH_GET", "block_keys": [value]}, (200,), reject=False)
    for raw in [str(I64_MAX + 1), str(I64_MIN - 1), "-9223372036854775808.0", "9007199254740993.0", "1e19", "1.5",
                "-0.5", "1e400", "NaN", "true", "{}"]:
        meta("getCacheLocation", b'{"instance_id": "%s", "query_type": 1, "block_keys": [%s]}' % (INSTANCE.encode(), raw.encode()), (400,))
    for raw in ['"%d"' % (I64_MAX + 1), '"0x10"', '"1.0"', '""', '"1e3"']:
        meta("getCacheLocation", b'{"instance_id": "%s", "query_type": 1, "block_keys": [%s]}' % (INSTANCE.encode(), raw.encode()), (400,))
    for raw in ["2147483648", "-2147483649", "1.5", '"16"', "1e3"]:
        meta("registerInstance", b'{"instance_group": "fz", "instance_id": "x", "block_size": %s}' % raw.encode(), (400,))
    meta("registerInstance", {"instance_group": "fz", "instance_id": rand_name(rng), "block_size": -1,
                              "location_spec_infos": [{"name": "tp0", "size": 1}], "model_deployment": {"model_name": "m", "dtype": "d"}})
    meta("registerInstance", {"instance_group": "fz", "instance_id": rand_name(rng), "block_size": 4,
                              "location_spec_infos": [{"name": "tp0", "size": str(I64_MAX)}, {"name": "tp1", "size": str(I64_MAX)}],
                              "model_deployment": {"model_name": "m", "dtype": "d"}})
    meta("getCacheLocation", {"instance_id": INSTANCE, "query_type": "QT_REVERSE_ROLL_SW_MATCH", "block_keys": [1, 2], "sw_size": -(2**31)})
    meta("getCacheLocation", {"instance_id": INSTANCE, "query_type": "QT_PREFIX_MATCH", "block_keys": [1, 2], "block_mask": {"offset": 2**31 - 1}})
    meta("trimCache", {"instance_id": INSTANCE, "strategy": "TS_TIMESTAMP", "begin_timestamp": 2**31 - 1, "end_timestamp": -(2**31)})
    meta("startWriteCache", {"instance_id": INSTANCE, "block_keys": [1], "write_timeout_seconds": 2**31 - 1})
    admin("updateInstanceGroup", {"instance_group": {"name": "fz", "storage_candidates": ["fz-store"], "version": str(I64_MAX)},
                                  "current_version": str(I64_MIN)})
    admin("createInstanceGroup", {"instance_group": {"name": rand_name(rng), "storage_candidates": ["fz-store"],
                                                     "cache_config": {"reclaim_strategy": {"trigger_strategy": {"used_percentage": 1e308}}}}})
    # Duplicate keys: serde refuses a duplicated field (HTTP 400), whichever value is first.
    meta("getInstanceInfo", b'{"instance_id": "fz-inst", "instance_id": "other"}', (400,))
    admin("addAccount", b'{"user_name": "a", "user_name": "b", "password": "long-enough", "role": 0}', (400,))
    # Unknown enum names and numbers.
    for q in ['"QT_NOPE"', "99", "-1", '"qt_prefix_match"', "1.0", '""']:
        meta("getCacheLocation", b'{"instance_id": "fz-inst", "query_type": %s, "block_keys": [1]}' % q.encode(), (200, 400))
    admin("addAccount", {"user_name": rand_name(rng), "password": "long-enough", "role": "ROLE_ROOT"}, (400,))
    meta("trimCache", {"instance_id": INSTANCE, "strategy": 42}, (400,))
    # Path-like and hash-tag-like names, in every place a name goes.
    for bad in ["..", ".", "../etc", "a/../b", "/abs", "a//b", "a/b/", "{reg}", "a}b{c", "{i:fz-inst}", "x{y}", "%2e%2e", "a\\b"]:
        meta("getInstanceInfo", {"instance_id": bad})
        meta("registerInstance", {"instance_group": "fz", "instance_id": bad, "block_size": 4,
                                  "location_spec_infos": [{"name": "tp0", "size": 1}], "model_deployment": {"model_name": "m", "dtype": "d"}})
        meta("registerInstance", {"instance_group": "fz", "instance_id": rand_name(rng), "block_size": 4,
                                  "location_spec_infos": [{"name": bad, "size": 1}], "model_deployment": {"model_name": "m", "dtype": "d"}})
        admin("addStorage", {"storage": {"global_unique_name": bad, "nfs": {"root_path": "/tmp/fz"}}})
        admin("createInstanceGroup", {"instance_group": {"name": bad, "storage_candidates": ["fz-store"]}})
        admin("createApiKey", {"name": bad, "role": "ROLE_USER"})
        admin("revokeApiKey", {"key_id": bad})
    for root in ["/tmp/..", "/tmp/../etc", "relative/path", "", "/a/./../b"]:
        admin("addStorage", {"storage": {"global_unique_name": rand_name(rng), "nfs": {"root_path": root}}})
    # Not JSON objects, and wrong methods and routes.
    for body in [b"", b"null", b"[]", b'["t", "fz-inst"]', b"\"x\"", b"42", b"{", b"\x00" * 10, b"{}" * 3, b"{} x"]:
        meta("getCacheLocation", body, (400,))
        admin("listStorage", body, (400,))
    for method in ["GET", "PUT", "DELETE", "PATCH"]:
        out.append(("meta", method, "/api/getCacheLocation", b"{}", {}, (405,), True))
        out.append(("admin", method, "/api/addStorage", b"{}", {}, (405,), True))
    for path in ["/api/", "/api/../admin", "/api/getCacheLocation/x", "/API/getCacheLocation", "/api/%00", "/" + "a" * 2000]:
        out.append(("meta", "POST", path, b"{}", {}, (404,), True))
    # Malformed or wrong credentials: 401, never a crash, never state.
    for auth in ["Basic !!!", "Bearer ", "Bearer kvcm_zz", "Basic " + "QQ==" * 2000, "Digest x", "Bearer a:b:c",
                 "Bearer kvcm_" + "0" * 16 + "_" + "0" * 64, "Basic " + "w6k6w6k=", "bearer   root:nope"]:
        out.append(("meta", "POST", "/api/getInstanceInfo", json.dumps({"instance_id": INSTANCE}).encode(),
                    {"Authorization": auth}, (401, 429), True))
        out.append(("admin", "POST", "/api/listStorage", b"{}", {"Authorization": auth}, (401, 429), True))
    return out


def send(base, method, path, body, headers):
    u = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    guard = Guard()
    bases = {"meta": os.environ["KVCM_FUZZ_META"], "admin": os.environ["KVCM_FUZZ_ADMIN"]}
    auth = {"meta": os.environ["KVCM_FUZZ_META_AUTH"], "admin": os.environ["KVCM_FUZZ_ADMIN_AUTH"]}
    failures = []
    for r in range(args.rounds):
        rng = random.Random(r)
        for plane, method, path, body, headers, allowed, must_reject in cases(rng):
            guard.before()
            status, data = send(bases[plane], method, path, body, {"Authorization": auth[plane], **headers})
            problem = guard.after(method, path, status, data)
            if not problem and status not in allowed:
                problem = f"{method} {path}: HTTP {status}, expected one of {allowed}: {data[:300]!r}"
            if not problem and must_reject and status == 200 and json.loads(data)["header"]["status"]["code"] == "OK":
                problem = f"{method} {path}: a hostile request was accepted: {body[:120]!r}"
            if problem:
                failures.append(problem)
    guard.record_count()
    print(f"hostile: {guard.count} requests, {len(failures)} failures")
    for f in failures[:30]:
        print("  " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
