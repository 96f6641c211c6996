"""A demo deployment for screenshots of the attach window: vLLM 0.33's own ZmqEventPublisher
(from its wheel, loaded by tests/peers/kv_events_wheels.py as the peer tests do) on two data-parallel ranks, publishing chat-like
traffic: 4 shared system prompts of 4-12 blocks, each followed by per-request continuations
on one rank or the other, with evictions, for SECONDS. usage: demo_publisher.py BASE_PORT REPLAY_PORT SECONDS"""
import hashlib
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import kv_events_wheels as peer_kv_events  # noqa: E402

base, replay, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
kv = peer_kv_events.load("vllm")
pubs = [kv.ZmqEventPublisher(r, endpoint="tcp://*:%d" % base, replay_endpoint="tcp://*:%d" % replay) for r in range(2)]
rng = random.Random(7)


def h(*parts):
    return hashlib.sha256(repr(parts).encode()).digest()


def chain(prefix_id, n, parent=None, tag=""):
    hashes, p = [], parent
    for k in range(n):
        p = h(prefix_id, tag, k, p)
        hashes.append(p)
    return hashes


systems = [chain("system", rng.randint(4, 12), tag=str(i)) for i in range(4)]
cached = [[], []]
end = time.time() + seconds
req = 0
print("publishing", flush=True)
while time.time() < end:
    r = rng.randint(0, 1)
    sysp = systems[rng.randrange(4)]
    events = []
    if not any(x == sysp[0] for x in cached[r]):
        events.append(peer_kv_events.make(kv.BlockStored, block_hashes=sysp, parent_block_hash=None,
                                          token_ids=[rng.randrange(32000) for _ in range(16 * len(sysp))], block_size=16, medium="GPU"))
        cached[r] += sysp
    tail = chain("req", rng.randint(1, 6), parent=sysp[-1], tag=str(req))
    events.append(peer_kv_events.make(kv.BlockStored, block_hashes=tail, parent_block_hash=sysp[-1],
                                      token_ids=[rng.randrange(32000) for _ in range(16 * len(tail))], block_size=16, medium="GPU"))
    cached[r] += tail
    if len(cached[r]) > 300:  # evict the oldest request blocks (never a system prompt's first)
        old = [x for x in cached[r][:40] if not any(x in s for s in systems)]
        events.append(peer_kv_events.make(kv.BlockRemoved, block_hashes=old, medium="GPU"))
        cached[r] = [x for x in cached[r] if x not in old]
    pubs[r].publish(kv.KVEventBatch(time.time(), events))
    req += 1
    time.sleep(0.01)
for p in pubs:
    p.shutdown()
