#!/usr/bin/env python3
"""Times the write path's two scripts (start_write_cache, finish_write_cache) inside one Valkey,
with no frontend, for several versions of lua/ side by side.

    loadtest/lua/script_time.py --port 7901 [--rounds 5] [--sessions 1000] [--blocks 32] \
        DIR_OR_REV[+trim] ...

Each argument is a directory holding lib/record.lua and the scripts, or a git revision whose
lua/ is taken with `git show`; `+trim` gives its scripts only the library functions they call,
as core/src/scripts.rs does since 0bfdb99 (without it, the whole library, as before). Sessions
of the versions interleave (one session of each in turn, same keys' shapes), so machine noise
falls on all of them alike. Every round starts from FLUSHALL, skips its first 20 sessions, and
reports the mean script time per call from SLOWLOG (slowlog-log-slower-than 0 for the round).

The server must be one you may flush (a scratch valkey-server, not a cluster node in use).
"""
import argparse
import os
import random
import re
import socket
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")


def trim(lib, body):
    """The library's text, without the functions `body` never calls (see core/src/scripts.rs)."""
    lines = lib.split("\n")
    items, i, plain = [], 0, 0
    while i < len(lines):
        m = re.match(r"local function (\w+)\(", lines[i])
        if not m:
            i += 1
            continue
        start = i
        while start > plain and lines[start - 1].startswith("--"):
            start -= 1
        if plain < start:
            items.append((None, lines[plain:start]))
        end = i
        if not lines[i].rstrip().endswith(" end"):
            while lines[end] != "end":
                end += 1
        items.append((m.group(1), lines[start:end + 1]))
        i = plain = end + 1
    items.append((None, lines[plain:]))
    called, keep = set(re.findall(r"\w+", body)), set()
    grew = True
    while grew:
        grew = False
        for name, text in items:
            if name and name not in keep and name in called:
                keep.add(name)
                called |= set(re.findall(r"\w+", "\n".join(text)))
                grew = True
    return "\n".join(l for name, text in items if name is None or name in keep for l in text)


def version(arg):
    if os.path.isdir(arg):
        return arg
    d = tempfile.mkdtemp(prefix="kvcm-lua-")
    os.makedirs(f"{d}/lib")
    for f in ("lib/record.lua", "start_write_cache.lua", "finish_write_cache.lua"):
        with open(f"{d}/{f}", "wb") as out:
            out.write(subprocess.check_output(["git", "-C", ROOT, "show", f"{arg}:lua/{f}"]))
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--blocks", type=int, default=32)
    ap.add_argument("versions", nargs="+")
    a = ap.parse_args()
    c = Conn(a.port)
    shas = []
    for v in a.versions:
        d = version(v.removesuffix("+trim"))
        lib = open(f"{d}/lib/record.lua").read()
        pair = []
        for name in ("start_write_cache.lua", "finish_write_cache.lua"):
            body = open(f"{d}/{name}").read()
            src = (trim(lib, body) if v.endswith("+trim") else lib) + body
            pair.append(c.cmd("SCRIPT", "LOAD", src))
        shas.append(pair)
    keys = ["{i}blocks", "{i}sessions", "{i}seq", "{i}files", "{i}usage", "{i}lru", "{i}lfu", "{i}itouch", "{i}del"]
    means = [([], []) for _ in a.versions]
    c.cmd("CONFIG", "SET", "slowlog-max-len", str(4 * a.sessions * len(a.versions) + 100))
    for r in range(a.rounds):
        c.cmd("FLUSHALL")
        c.cmd("CONFIG", "SET", "slowlog-log-slower-than", "0")
        rnd = random.Random(r)
        for n in range(a.sessions):
            if n == 20:
                c.cmd("SLOWLOG", "RESET")
            for start, finish in shas:
                sid = "%016x" % rnd.getrandbits(64)
                blocks = [rnd.getrandbits(63).to_bytes(8, "big") for _ in range(a.blocks)]
                rep = c.cmd("EVALSHA", start, 5, keys[0], "{i}s:" + sid, keys[1], keys[2], keys[3],
                            sid, 30, 1, 1, "", "8192", *blocks)
                assert rep[0] == 1, rep
                rep = c.cmd("EVALSHA", finish, 8, keys[0], "{i}s:" + sid, keys[1], *keys[4:], sid, f"o{a.blocks}")
                assert rep == [1, a.blocks], rep
        c.cmd("CONFIG", "SET", "slowlog-log-slower-than", "10000")
        log = c.cmd("SLOWLOG", "GET", "-1")
        for v, (start, finish) in enumerate(shas):
            for part, sha in ((0, start), (1, finish)):
                t = [e[2] for e in log if e[3][0].lower() == b"evalsha" and e[3][1] == sha]
                means[v][part].append(statistics.mean(t))
    for v, (s, f) in zip(a.versions, means):
        ms, mf = statistics.median(s), statistics.median(f)
        print(f"{v}: start {ms:.1f} us, finish {mf:.1f} us, session {ms + mf:.1f} us "
              f"(medians over {a.rounds} rounds of the mean per call)")


if __name__ == "__main__":
    main()
