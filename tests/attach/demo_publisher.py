"""A demo deployment for screenshots of the attach window: vLLM 0.33's own ZmqEventPublisher
(from its wheel, loaded by tests/peers/kv_events_wheels.py as the peer tests do) on two data-parallel ranks, publishing chat-like
traffic: 4 shared system prompts of 4-12 blocks, each followed by per-request continuations
on one rank or the other, with evictions, for SECONDS, at a rate that rises and falls.
With METRICS_PORT, rank r also serves a /metrics on METRICS_PORT + r, written by
prometheus_client under vLLM's names; its numbers come from this script, not from an engine
(the demo has no scheduler): usage = cached blocks / 320, a lookup per request whose hits are
the system prompt's tokens when that rank already caches it, and a preemption counted on every
fourth eviction. usage: demo_publisher.py BASE_PORT REPLAY_PORT SECONDS [METRICS_PORT]"""
import hashlib
import math
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
CAPACITY = 320  # blocks per rank: evictions start above 300
metrics = None
if len(sys.argv) > 4:
    import prometheus_client as prom
    metrics = []
    for r in range(2):
        reg = prom.CollectorRegistry()
        m = {"usage": prom.Gauge("vllm:kv_cache_usage_perc", "KV-cache usage (1 = 100%)", ["engine"], registry=reg),
             "queries": prom.Counter("vllm:prefix_cache_queries", "Prefix-cache lookups (tokens)", ["engine"], registry=reg),
             "hits": prom.Counter("vllm:prefix_cache_hits", "Prefix-cache hits (tokens)", ["engine"], registry=reg),
             "preempt": prom.Counter("vllm:num_preemptions", "Preemptions", ["engine"], registry=reg)}
        for k in m:
            m[k] = m[k].labels(engine=str(r))
        prom.start_http_server(int(sys.argv[4]) + r, addr="127.0.0.1", registry=reg)
        metrics.append(m)
evictions = [0, 0]


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
    hit = any(x == sysp[0] for x in cached[r])
    if not hit:
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
        evictions[r] += 1
        if metrics and evictions[r] % 4 == 0:
            metrics[r]["preempt"].inc()
    if metrics:
        metrics[r]["usage"].set(min(1.0, len(cached[r]) / CAPACITY))
        metrics[r]["queries"].inc(16 * (len(sysp) + len(tail)))
        if hit:
            metrics[r]["hits"].inc(16 * len(sysp))
    pubs[r].publish(kv.KVEventBatch(time.time(), events))
    req += 1
    time.sleep(0.01 + 0.05 * (1 + math.sin(time.time() / 4)) / 2)  # 20-100 requests a second
for p in pubs:
    p.shutdown()
