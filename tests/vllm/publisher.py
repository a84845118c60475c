"""A stand-in for vLLM's KV-event publisher (vllm/distributed/kv_events.py, ZmqEventPublisher),
speaking its wire format with the same libraries vLLM uses (pyzmq, msgspec): a PUB socket
sending multipart [topic, seq (8 bytes big-endian), msgpack KVEventBatch], and a ROUTER replay
socket answering [b"", start_seq] with [b"", seq, payload] per buffered batch, then seq -1 and
an empty payload. The event structs follow vLLM's: tagged msgspec Structs, encoded as arrays
(`--encoding array`, vLLM before the map encoding) or as maps with a "type" tag (`map`).

Driven by JSON lines on stdin (tests/tests/vllm_events.rs); prints "ready <pub> <replay>":
  {"stored": [h...], "parent": h|null, "tokens": [...], "block_size": n, "medium": "GPU"}
  {"removed": [h...]}      {"cleared": true}
  {"skip": true}    the next batch is buffered for replay but not sent (a lost message)
  {"quit": true}
Hashes are ints (vLLM's int form) unless "bytes": true asks for 32-byte digests ending in them.
"""

import argparse
import itertools
import json
import sys
import threading
import time
from typing import Any, Optional, Union

import msgspec
import zmq

ap = argparse.ArgumentParser()
ap.add_argument("--encoding", choices=["array", "map"], default="array")
ap.add_argument("--topic", default="")
ap.add_argument("--port", type=int, default=0, help="publisher port (0: any free one)")
ap.add_argument("--replay-port", type=int, default=0, help="replay port (0: any free one)")
args = ap.parse_args()
ARRAY = args.encoding == "array"


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class KVCacheEvent(msgspec.Struct, array_like=ARRAY, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[Union[int, bytes]]
    parent_block_hash: Optional[Union[int, bytes]]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]


class BlockRemoved(KVCacheEvent):
    block_hashes: list[Union[int, bytes]]
    medium: Optional[str]


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]


ctx = zmq.Context()
def bind(sock, port):
    if port == 0:
        return sock.bind_to_random_port("tcp://127.0.0.1")
    sock.bind(f"tcp://127.0.0.1:{port}")
    return port


pub = ctx.socket(zmq.PUB)
pub_port = bind(pub, args.port)
router = ctx.socket(zmq.ROUTER)
replay_port = bind(router, args.replay_port)
encoder = msgspec.msgpack.Encoder()
buffer = []  # (seq, payload)
lock = threading.Lock()
seq = itertools.count()


def serve_replay():
    while True:
        frames = router.recv_multipart()
        # vLLM's replay takes exactly [identity, b"", start_seq (8 bytes)]; anything else is a bug.
        if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
            print(f"bad replay request {frames!r}", file=sys.stderr, flush=True)
            continue
        client, start = frames[0], int.from_bytes(frames[2], "big")
        with lock:
            batches = [b for b in buffer if b[0] >= start]
        for s, payload in batches:
            router.send_multipart((client, b"", s.to_bytes(8, "big"), payload))
        router.send_multipart((client, b"", (-1).to_bytes(8, "big", signed=True), b""))


threading.Thread(target=serve_replay, daemon=True).start()


def h(v, as_bytes):
    if v is None or not as_bytes:
        return v
    return bytes(24) + int(v).to_bytes(8, "big", signed=int(v) < 0)


print(f"ready {pub_port} {replay_port}", flush=True)
skip_next = False
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd.get("quit"):
        break
    if cmd.get("skip"):
        skip_next = True
        continue
    b = cmd.get("bytes", False)
    if "stored" in cmd:
        event = BlockStored(
            block_hashes=[h(x, b) for x in cmd["stored"]],
            parent_block_hash=h(cmd.get("parent"), b),
            token_ids=cmd.get("tokens", []),
            block_size=cmd.get("block_size", 16),
            lora_id=None,
            medium=cmd.get("medium", "GPU"),
        )
    elif "removed" in cmd:
        event = BlockRemoved(block_hashes=[h(x, b) for x in cmd["removed"]], medium=cmd.get("medium", "GPU"))
    else:
        event = AllBlocksCleared()
    payload = encoder.encode(KVEventBatch(ts=time.time(), events=[event]))
    s = next(seq)
    with lock:
        buffer.append((s, payload))
    if skip_next:
        skip_next = False
    else:
        pub.send_multipart((args.topic.encode(), s.to_bytes(8, "big"), payload))
    print(f"sent {s}", flush=True)
