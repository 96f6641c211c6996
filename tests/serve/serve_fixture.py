"""Starts `kvscope-cli serve` on a free loopback port and stops it; small HTTP helpers.

Shared by the peer tests in this folder. Every helper talks to 127.0.0.1 only.
"""
import http.client
import json
import os
import subprocess
import sys
import threading
import time


class Server:
    def __init__(self, cli, model, *extra):
        self.cmd = [cli, "serve", "--model", model, "--port", "0", "--threads", "1", *extra]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr_lines = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        # "kvscope serve: KV events on tcp://... (replay tcp://...)" when asked, then
        # "kvscope serve: listening on http://127.0.0.1:PORT (model NAME)".
        self.kv_events = self.kv_replay = None
        line = self.proc.stdout.readline()
        if "KV events on " in line:
            parts = line.split("KV events on ", 1)[1].split()
            self.kv_events = parts[0]
            if len(parts) > 2 and parts[1] == "(replay":
                self.kv_replay = parts[2].rstrip(")")
            line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError("server did not start: %r %s" % (line, "".join(self.stderr_lines)))
        self.port = int(line.split("127.0.0.1:")[1].split()[0])
        self.model_name = line.rsplit("(model ", 1)[1].rstrip(")\n")
        self.base = "http://127.0.0.1:%d" % self.port
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("server never became healthy")

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """One request on a fresh connection: (status, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def metrics_text(self, headers=None):
        status, body = self.request("GET", "/metrics", headers=headers)
        assert status == 200, (status, body)
        return body.decode()

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                rc = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise RuntimeError("server did not stop on SIGTERM")
            if rc != 0:
                raise RuntimeError("server exited with %d: %s" % (rc, "".join(self.stderr_lines[-5:])))
        elif self.proc.returncode != 0:
            raise RuntimeError("server died with %d: %s" % (self.proc.returncode, "".join(self.stderr_lines[-10:])))


def samples(text):
    """{(name, frozenset(labels)): value} through prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(smp, name, **labels):
    """Sum of the samples called `name` whose labels include `labels`."""
    want = set(labels.items())
    hits = [v for (n, ls), v in smp.items() if n == name and want <= set(ls)]
    if not hits:
        raise KeyError("no sample %s %s" % (name, labels))
    return sum(hits)


def wait_idle(server, timeout=30):
    """Polls /metrics until no request runs or waits and no block is in use; returns the samples."""
    deadline = time.time() + timeout
    while True:
        smp = samples(server.metrics_text())
        idle = (value(smp, "vllm:num_requests_running") == 0 and value(smp, "vllm:num_requests_waiting") == 0
                and value(smp, "kvscope:requests_in_flight") == 0 and value(smp, "kvscope:kv_blocks", state="used") == 0)
        if idle or time.time() > deadline:
            return smp, idle
        time.sleep(0.1)


class Checks:
    """Named checks that all run; the script fails at the end when any did."""
    def __init__(self):
        self.failed = []

    def run(self, name, fn, *args):
        t0 = time.time()
        try:
            fn(*args)
            print("PASS %-40s %.2fs" % (name, time.time() - t0), flush=True)
        except Exception as e:  # report every failing check, not just the first
            import traceback
            traceback.print_exc()
            print("FAIL %-40s %s" % (name, e), flush=True)
            self.failed.append(name)

    def exit(self):
        if self.failed:
            print("failed: " + ", ".join(self.failed))
            sys.exit(1)
        print("all checks passed")
        sys.exit(0)
