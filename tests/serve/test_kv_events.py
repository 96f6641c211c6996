"""kvscope's KV-event stream decoded by another engine's own classes: vLLM's
vllm/distributed/kv_events.py or SGLang's sglang/srt/disaggregation/kv_events.py (KVSCOPE_KV_PEER=
vllm|sglang), taken from that project's wheel on PyPI (pip download --no-deps; only the one file
is kept), loaded by tests/peers/kv_events_wheels.py with small stubs for the project-internal
names it imports, every payload decoded with msgspec.msgpack.Decoder(KVEventBatch). The hash
chains the events describe must be exactly the prefix cache in kvscope's snapshot, and the
replay socket must hand back the same batches. With KVSCOPE_KV_MODEL=qwen35 the model is a
synthetic hybrid written here (Gated DeltaNet + attention, prefix hits through state
checkpoints), and every stored block must say it is KV group 0, full attention, in the peer's own
fields. usage: test_kv_events.py KVSCOPE_CLI MODEL"""
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

from serve_fixture import Server, wait_idle

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import kv_events_wheels  # noqa: E402

CLI, MODEL = sys.argv[1], sys.argv[2]
PEER = os.environ.get("KVSCOPE_KV_PEER", "vllm")  # vllm | sglang (kv_events_wheels.PEERS)
HYBRID = os.environ.get("KVSCOPE_KV_MODEL") == "qwen35"
skip = kv_events_wheels.skip


def main():
    try:
        import msgspec
        import zmq
    except ImportError as e:
        skip("pyzmq/msgspec not installed: %s" % e)
    kv = kv_events_wheels.load(PEER)
    decoder = msgspec.msgpack.Decoder(kv.KVEventBatch)
    fails = []
    model = MODEL
    if HYBRID:
        model = os.path.join(tempfile.mkdtemp(), "qwen35.gguf")
        subprocess.run([CLI, "make-model", "--out", model, "--arch", "qwen35", "--n-layer", "4"], check=True,
                       capture_output=True)
    group_fields = "group_idx" in getattr(kv.BlockStored, "__struct_fields__", ())

    srv = Server(CLI, model, "--kv-blocks", "48", "--kv-events-endpoint", "tcp://127.0.0.1:*",
                 "--kv-events-replay", "tcp://127.0.0.1:*", "--kv-events-topic", "kvscope")
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.connect(srv.kv_events)
    sub.setsockopt(zmq.SUBSCRIBE, b"kvscope")
    time.sleep(0.5)  # let the subscription reach the publisher

    prefix = ("Once upon a time, there was a little girl named Lily who lived in a small house near the big forest. "
              "Every day she walked to the river with her dog and they played in the warm sun until the evening came.")
    prompt_ids = json.loads(subprocess.run([CLI, "generate", "--model", model, "--prompt", prefix, "-n", "1", "--json",
                                            "--threads", "1"], check=True, capture_output=True, text=True).stdout)["prompt_tokens"]
    for i in range(6):  # a shared prefix, then enough other text to evict (48 blocks of 16)
        srv.request("POST", "/v1/completions", {"prompt": prefix, "max_tokens": 8 + i, "temperature": 0})
    for i in range(40):
        srv.request("POST", "/v1/completions", {"prompt": "Story number %d: %s" % (i, "the dog ran to the park " * (i % 5 + 1)),
                                                "max_tokens": 24, "temperature": 1.0, "seed": i})
    _, idle = wait_idle(srv)
    snap = json.loads(srv.request("GET", "/kvscope/snapshot")[1])
    time.sleep(0.5)  # the publisher's thread sends what the last steps queued

    live = []
    while sub.poll(500):
        live.append(sub.recv_multipart())
    if not live:
        fails.append("no KV event message arrived on the PUB socket")
    for frames in live:
        if len(frames) != 3 or frames[0] != b"kvscope" or len(frames[1]) != 8:
            fails.append("bad frames %r" % [f[:20] for f in frames])
            break
    seqs = [int.from_bytes(f[1], "big") for f in live]
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))) if seqs else False:
        fails.append("live sequence numbers not consecutive: %s" % seqs[:20])

    # Replay from 0: every batch since the start, then the end marker.
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(srv.kv_replay)
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])
    replay = []
    while dealer.poll(5000):
        _, seq, payload = dealer.recv_multipart()
        if int.from_bytes(seq, "big", signed=True) == -1:
            break
        replay.append((int.from_bytes(seq, "big"), payload))
    else:
        fails.append("replay never sent its end marker")
    if [s for s, _ in replay] != list(range(len(replay))):
        fails.append("replay sequence numbers %s..." % [s for s, _ in replay][:10])
    by_seq = dict(replay)
    for frames, s in zip(live, seqs):
        if by_seq.get(s) != frames[2]:
            fails.append("replayed batch %d differs from the published one" % s)
            break

    # vLLM's decoder on every payload; then the events replayed onto a model of the cache.
    # Blocks per hash: like vLLM, kvscope may cache two blocks with the same contents (two
    # requests computed the same prefix at once), and stores and removes each block.
    cache = collections.Counter()
    ever = {}   # every block ever stored: hash -> (parent, tokens)
    stored = removed = 0
    first_blocks = []
    for s, payload in replay:
        try:
            batch = decoder.decode(payload)
        except msgspec.ValidationError as e:
            fails.append("%s's decoder rejected batch %d: %s" % (PEER, s, e))
            continue
        if s == 0 and not (len(batch.events) == 1 and isinstance(batch.events[0], kv.AllBlocksCleared)):
            fails.append("batch 0 is not AllBlocksCleared: %r" % batch)
        rank = batch.data_parallel_rank if PEER == "vllm" else batch.attn_dp_rank  # same slot, SGLang's name
        if rank != 0 or not (time.time() - 600 < batch.ts <= time.time() + 1):
            fails.append("batch %d: rank %r ts %r" % (s, rank, batch.ts))
        for ev in batch.events:
            if isinstance(ev, kv.AllBlocksCleared):
                cache.clear()
            elif isinstance(ev, kv.BlockStored):
                stored += 1
                if ev.block_size != 16 or len(ev.token_ids) != 16 * len(ev.block_hashes) or ev.medium != "GPU":
                    fails.append("odd BlockStored %r" % ev)
                if HYBRID and group_fields and (ev.group_idx != 0 or ev.kv_cache_spec_kind != "full_attention"):
                    fails.append("a hybrid's attention block not in group 0, full attention: %r" % ev)
                parent = ev.parent_block_hash
                if parent is not None and cache[parent] <= 0:
                    fails.append("BlockStored names a parent %s that is not cached" % parent)
                for k, h in enumerate(ev.block_hashes):
                    cache[h] += 1
                    ever[h] = (parent, list(ev.token_ids[16 * k:16 * k + 16]))
                    if parent is None:
                        first_blocks.append(list(ev.token_ids[:16]))
                    parent = h
            elif isinstance(ev, kv.BlockRemoved):
                removed += 1
                for h in ev.block_hashes:
                    if cache[h] <= 0:
                        fails.append("BlockRemoved of %s, which is not stored" % h)
                    cache[h] -= 1
    print("events: %d batches (%d live), %d stored, %d removed, %d blocks hashed at the end" %
          (len(replay), len(live), stored, removed, sum(cache.values())))
    cache = +cache  # drop hashes at zero
    snap_hashes = collections.Counter(b["hash"] for b in snap["blocks"] if "hash" in b)
    if not idle:
        fails.append("server not idle")
    if cache != snap_hashes:
        fails.append("events say %d hashed blocks, the snapshot %d (%d hashes differ)" %
                     (sum(cache.values()), sum(snap_hashes.values()), len(set(cache) ^ set(snap_hashes))))
    if removed == 0:
        fails.append("no eviction was reported (the pool should have overflowed)")
    if prompt_ids[:16] not in first_blocks:
        fails.append("no stored root block holds the shared prompt's first 16 tokens")
    # The shared prefix's chain: block k holds prompt tokens [16k, 16k + 16) and its parent is
    # block k - 1, as the engine hashed them.
    full = len(prompt_ids) // 16
    parent, found = None, 0
    for k in range(full):
        want = prompt_ids[16 * k:16 * k + 16]
        hit = [h for h, (p, t) in ever.items() if p == parent and t == want]
        if not hit:
            break
        parent, found = hit[0], found + 1
    if full < 3 or found != full:
        fails.append("the shared prompt's %d full blocks: only %d found as a chain in the events" % (full, found))
    srv.stop()
    if fails:
        print("FAIL: " + "\n  ".join(fails[:20]))
        sys.exit(1)
    if HYBRID and group_fields and stored == 0:
        fails.append("the hybrid stored no block")
    srv_kind = "qwen35 hybrid, group fields %s" % ("checked" if group_fields else "not in this peer") if HYBRID else MODEL
    print("PASS kv events decoded by %s %s's KVEventBatch, chains match the snapshot (%s)" %
          (PEER, kv_events_wheels.PEERS[PEER][1], srv_kind))


if __name__ == "__main__":
    main()
