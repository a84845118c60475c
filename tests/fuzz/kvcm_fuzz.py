"""What the fuzzers share: the stack they talk to, the Valkey namespace snapshot, and the
invariants every reply must keep (docs/security.md, "Fuzzing").

Invariants, checked on every request:

* no 5xx (503 and 408 only under deliberate overload, which these runs never cause);
* every reply from an RPC route carries the Tair header shape
  ``{"header": {"status": {"code": <enum name>, "message": str}, "request_id": str}}``;
* every rejected request (HTTP status other than 200, or a non-OK code) leaves the namespace
  byte-identical: every key's DUMP, compared before and after. The `{auth}` keys (failed-login
  counters, which a refused login is meant to change) are left out.

The stack is described by environment variables that tests/fuzz/run.sh sets: KVCM_FUZZ_META,
KVCM_FUZZ_ADMIN (base URLs), KVCM_FUZZ_NAMESPACE, KVCM_FUZZ_VALKEY (a seed node, redis://h:p),
KVCM_FUZZ_META_AUTH and KVCM_FUZZ_ADMIN_AUTH (Authorization header values) and KVCM_FUZZ_COUNT
(a file where the number of requests checked is added up).
"""

import json
import os
import threading
import time
import urllib.parse

import redis

STATUS_CODES = {
    "UNSPECIFIED", "OK", "UNSUPPORTED", "INTERNAL_ERROR", "SERVICE_NOT_READY", "INVALID_ARGUMENT",
    "DUPLICATE_ENTITY", "REACH_MAX_ENTITY_CAPACITY", "INSTANCE_NOT_EXIST", "SERVER_NOT_LEADER",
    "IO_ERROR", "UNKNOWN_ERROR",
}
# Routes whose replies are not RPC envelopes.
NON_RPC_PATHS = {"/metrics", "/openapi.json", "/api/healthy"}


class Namespace:
    """Byte-exact snapshots of every key of one namespace across the cluster's primaries."""

    def __init__(self, seed_url: str, namespace: str):
        seed = urllib.parse.urlparse(seed_url)
        self.pattern = f"{namespace}:*"
        self.auth_marker = f"{namespace}:v1:{{auth}}:"
        first = redis.Redis(host=seed.hostname, port=seed.port)
        self.nodes = []
        # redis-py parses CLUSTER NODES into {"host:port": {"flags": …, …}}.
        for addr, node in first.execute_command("CLUSTER NODES").items():
            flags = node["flags"].split(",")
            if "master" in flags and "fail" not in flags:
                host, port = addr.split("@")[0].rsplit(":", 1)
                self.nodes.append(redis.Redis(host=host, port=int(port)))

    def dump(self) -> dict:
        out = {}
        for node in self.nodes:
            keys = [k for k in node.keys(self.pattern) if not k.decode(errors="replace").startswith(self.auth_marker)]
            if not keys:
                continue
            pipe = node.pipeline(transaction=False)
            for k in keys:
                pipe.dump(k)
            for k, v in zip(keys, pipe.execute()):
                if v is not None:
                    out[k] = v
        return out

    def settled(self) -> dict:
        """A snapshot taken once two in a row agree (a read's recency update is written just after
        its reply, so an accepted read may still be landing)."""
        last = self.dump()
        for _ in range(50):
            time.sleep(0.002)
            now = self.dump()
            if now == last:
                return now
            last = now
        return last


def envelope_problem(status: int, path: str, body: bytes) -> str | None:
    """Why a reply breaks the invariants, or None."""
    if status >= 500:
        return f"HTTP {status} (a server error)"
    if path in NON_RPC_PATHS:
        return None
    try:
        reply = json.loads(body)
    except ValueError:
        return f"HTTP {status} with a body that is not JSON: {body[:200]!r}"
    header = reply.get("header") if isinstance(reply, dict) else None
    status_obj = header.get("status") if isinstance(header, dict) else None
    if not isinstance(status_obj, dict):
        return f"HTTP {status} without header.status: {body[:200]!r}"
    if status_obj.get("code") not in STATUS_CODES or not isinstance(status_obj.get("message"), str):
        return f"HTTP {status} with a malformed header.status: {status_obj!r}"
    if not isinstance(header.get("request_id"), str) or not header["request_id"]:
        return f"HTTP {status} without a request_id"
    return None


def rejected(status: int, body: bytes) -> bool:
    if status != 200:
        return True
    try:
        return json.loads(body)["header"]["status"]["code"] != "OK"
    except (ValueError, KeyError, TypeError):
        return True


class Guard:
    """Checks one request at a time against the invariants (the fuzzers run one worker)."""

    def __init__(self):
        self.ns = Namespace(os.environ["KVCM_FUZZ_VALKEY"], os.environ["KVCM_FUZZ_NAMESPACE"])
        self.snapshot = None
        self.count = 0
        self.lock = threading.Lock()

    def before(self):
        if self.snapshot is None:
            self.snapshot = self.ns.settled()

    def after(self, method: str, path: str, status: int, body: bytes) -> str | None:
        self.count += 1
        problem = envelope_problem(status, path, body)
        if problem:
            return f"{method} {path}: {problem}"
        if method == "GET" and path in NON_RPC_PATHS:
            return None
        if not rejected(status, body):
            self.snapshot = None  # an accepted request may change state: take a fresh one next time
            return None
        now = self.ns.settled()
        if now != self.snapshot:
            changed = sorted({k for k in now.keys() | self.snapshot.keys() if now.get(k) != self.snapshot.get(k)})
            self.snapshot = now
            return f"{method} {path} was rejected (HTTP {status}) but changed {len(changed)} keys: {changed[:5]!r}"
        return None

    def record_count(self):
        path = os.environ.get("KVCM_FUZZ_COUNT")
        if not path:
            return
        with self.lock, open(path, "a") as f:
            f.write(f"{self.count}\n")
