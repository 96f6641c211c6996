"""A bounded loopback load run against `kvscope-cli serve`: 2,000 requests of random lengths
from 16 client threads (the openai client, plus raw sockets that vanish), with disconnects,
invalid requests and a small KV pool (preemptions) and queue limit (503s). Every request must
end as completed, disconnected by us, or refused with a status: 0 lost. At the end no block is
in use, the KV invariants hold, the server's own counts agree with the clients', and RSS stayed
flat after warm-up. usage: test_load.py KVSCOPE_CLI MODEL"""
import json
import random
import socket
import struct
import subprocess
import sys
import threading
import time

import openai

from serve_fixture import Server, samples, value, wait_idle

CLI, MODEL = sys.argv[1], sys.argv[2]
N_REQUESTS = 2000
N_CLIENTS = 16
WORDS = "the a dog cat sun tree girl boy ran saw big little happy sad ball park went home".split()


def wait_validation_after_probe(srv, name, smp, timeout=60):
    """Sends one small request after the load has ended and waits until the server has counted
    an idle-time KV validation beyond those it had counted before it; True when it did."""
    before = value(smp, "kvscope:kv_validations_total")
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=60)
    client.completions.create(model=name, prompt="the dog", max_tokens=2, temperature=0)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if value(samples(srv.metrics_text()), "kvscope:kv_validations_total") > before:
            return True
        time.sleep(0.1)
    return False


def main():
    srv = Server(CLI, MODEL, "--kv-blocks", "64", "--max-queued", "16")
    name = srv.model_name
    lock = threading.Lock()
    outcome = {"completed": 0, "disconnected": 0, "refused": 0, "lost": 0}
    seqs = {"completed": 0, "disconnected": 0, "reset": 0}  # sequences (n counts each sample)
    statuses = {}
    lost_why = []
    next_req = [0]
    rss = {}

    def count(kind, n_seqs=1, status=None, reset=False):
        with lock:
            outcome[kind] += 1
            if reset:
                seqs["reset"] += n_seqs
            elif kind in seqs:
                seqs[kind] += n_seqs
            if status is not None:
                statuses[status] = statuses.get(status, 0) + 1

    def prompt(rng):
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60)))

    def one(rng, client):
        kind = rng.random()
        mt = rng.randint(1, 48)
        temp = rng.choice([0, 0.7, 1.0])
        try:
            if kind < 0.45:
                r = client.completions.create(model=name, prompt=prompt(rng), max_tokens=mt, temperature=temp,
                                              seed=rng.randint(0, 1000))
                assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens <= mt
                count("completed")
            elif kind < 0.65:
                toks, usage = 0, None
                for c in client.completions.create(model=name, prompt=prompt(rng), max_tokens=mt, temperature=temp,
                                                   stream=True, stream_options={"include_usage": True}):
                    if c.usage:
                        usage = c.usage
                assert usage is not None and usage.completion_tokens <= mt
                count("completed")
            elif kind < 0.75:
                r = client.chat.completions.create(model=name, messages=[{"role": "user", "content": prompt(rng)}],
                                                   max_tokens=mt, temperature=temp)
                assert r.choices[0].finish_reason in ("stop", "length")
                count("completed")
            elif kind < 0.85:  # the openai client closes the stream after a few chunks
                stream = client.completions.create(model=name, prompt=prompt(rng), max_tokens=200, temperature=temp,
                                                   stream=True, extra_body={"ignore_eos": True})
                k = rng.randint(1, 5)
                for i, _ in enumerate(stream):
                    if i + 1 >= k:
                        break
                stream.close()
                count("disconnected")
            elif kind < 0.90:  # a raw socket that sends and resets without reading
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
                body = json.dumps({"prompt": prompt(rng), "max_tokens": 100, "stream": rng.random() < 0.5}).encode()
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                          + str(len(body)).encode() + b"\r\n\r\n" + body)
                if rng.random() < 0.5:
                    s.recv(100)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
                count("disconnected", reset=True)
            elif kind < 0.95:
                try:
                    client.completions.create(model=name, prompt=prompt(rng), max_tokens=mt, temperature=-1)
                    raise AssertionError("a negative temperature was accepted")
                except openai.BadRequestError:
                    count("refused", status=400)
            else:
                r = client.completions.create(model=name, prompt=prompt(rng), max_tokens=mt, temperature=1.0, n=2,
                                              seed=rng.randint(0, 1000))
                assert len(r.choices) == 2
                count("completed", n_seqs=2)
        except openai.APIStatusError as e:
            if e.status_code in (429, 503):
                count("refused", status=e.status_code)
            else:
                count("lost")
                lost_why.append("status %d: %s" % (e.status_code, e))
        except Exception as e:
            count("lost")
            lost_why.append(repr(e))

    def client_thread(t):
        rng = random.Random(1000 + t)
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=60)
        while True:
            with lock:
                i = next_req[0]
                if i >= N_REQUESTS:
                    return
                next_req[0] += 1
                if i == 300:
                    rss["warm"] = srv.rss_kib()
            one(rng, client)

    t0 = time.time()
    threads = [threading.Thread(target=client_thread, args=(t,)) for t in range(N_CLIENTS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=900)
    elapsed = time.time() - t0
    assert not any(th.is_alive() for th in threads), "the load run did not end"
    smp, idle = wait_idle(srv, timeout=60)
    # The server checks the KV invariants when its engine goes idle, on the engine thread just
    # after the step that emptied it, so /metrics can show the idle state a moment before that
    # check is counted (a sanitizer build widens the gap). One more request after the load, and
    # its validation awaited, gives a check that surely ran on the state the load left behind.
    validated = wait_validation_after_probe(srv, name, smp)
    seqs["completed"] += 1  # the probe: the server counts it among the finished
    smp, idle = wait_idle(srv, timeout=60)
    rss["end"] = srv.rss_kib()
    total = sum(outcome.values())
    print("load: %d requests in %.1f s (%.0f/s), outcomes %s, refusals %s" % (total, elapsed, total / elapsed, outcome, statuses))
    print("RSS after warm-up %d KiB, at the end %d KiB" % (rss["warm"], rss["end"]))
    fails = []
    if total != N_REQUESTS:
        fails.append("%d of %d requests accounted for" % (total, N_REQUESTS))
    if outcome["lost"]:
        fails.append("%d lost: %s" % (outcome["lost"], lost_why[:5]))
    if not idle:
        fails.append("not idle at the end: blocks used %s" % value(smp, "kvscope:kv_blocks", state="used"))
    if not validated or value(smp, "kvscope:kv_validation_failures_total") != 0:
        fails.append("KV validation: %s runs, %s failures" % (value(smp, "kvscope:kv_validations_total"),
                                                            value(smp, "kvscope:kv_validation_failures_total")))
    used = value(smp, "kvscope:kv_blocks", state="used")
    cached = value(smp, "kvscope:kv_blocks", state="cached")
    free = value(smp, "kvscope:kv_blocks", state="free")
    print("blocks at the end: used %d, cached %d, free %d; preemptions %d, evictions %d" %
          (used, cached, free, value(smp, "vllm:num_preemptions_total"), value(smp, "kvscope:evictions_total")))
    if used != 0 or cached + free != 64:
        fails.append("blocks: used %d cached %d free %d of 64" % (used, cached, free))
    # The server's own accounting agrees with the clients': every sequence the clients saw
    # complete ended stop/length; every one they dropped ended aborted or, when it was already
    # done by then, stop/length. A raw socket reset right after sending may take its request
    # with it (the kernel drops what the server had not read), so those count at most once.
    # Nothing was rejected inside the engine.
    done = value(smp, "vllm:request_success_total", finished_reason="stop") + \
        value(smp, "vllm:request_success_total", finished_reason="length")
    aborted = value(smp, "vllm:request_success_total", finished_reason="abort")
    seen = seqs["completed"] + seqs["disconnected"]
    if not seen <= done + aborted <= seen + seqs["reset"] or done < seqs["completed"]:
        fails.append("server counted %d done + %d aborted, clients %s" % (done, aborted, seqs))
    if value(smp, "kvscope:requests_rejected_total") != 0:
        fails.append("engine rejections: %d" % value(smp, "kvscope:requests_rejected_total"))
    # A sanitizer's shadow memory and quarantine grow with the work done: RSS says nothing there.
    ldd = subprocess.run(["ldd", CLI], capture_output=True, text=True).stdout
    sanitized = "libasan" in ldd or "libtsan" in ldd
    if sanitized:
        print("RSS not checked: the server is built with a sanitizer")
    elif rss["end"] - rss["warm"] > 64 * 1024:
        fails.append("RSS grew by %d KiB after warm-up" % (rss["end"] - rss["warm"]))
    if ("kvscope:http_errors_total", frozenset({("model_name", name), ("status", "500")})) in smp:
        fails.append("a 500 was answered")
    alive = srv.alive()
    srv.stop()
    if not alive:
        fails.append("the server died")
    if fails:
        print("FAIL: " + "; ".join(fails))
        sys.exit(1)
    print("server: %d done + %d aborted sequences; clients: %s" % (done, aborted, seqs))
    print("PASS load run")


if __name__ == "__main__":
    main()
