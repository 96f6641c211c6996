"""attach's Prometheus parser (attach/prometheus_parse.h) on text written by prometheus_client,
the Prometheus project's own Python client: counters, gauges, histograms, summaries, Info and
Enum, vLLM-style names with colons, label values with quotes, backslashes, newlines and UTF-8,
NaN and +-Inf. Every sample must come out with the name, labels and value that
prometheus_client's own parser reads from the same text. usage: test_prometheus_peer.py DUMP_TOOL MODEL"""
import json
import math
import os
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]


def main():
    try:
        import prometheus_client as pc
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as e:
        print("SKIPPED: prometheus_client not installed: %s" % e)
        sys.exit(77)
    reg = pc.CollectorRegistry()
    hits = pc.Counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", ["model_name", "engine"], registry=reg)
    hits.labels("m\"odel\\ \n1", "0").inc(12)
    hits.labels("ünïcode-模型", "1").inc(3.5)
    usage = pc.Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", ["engine"], registry=reg)
    usage.labels("0").set(0.25)
    usage.labels("1").set(float("nan"))
    pc.Gauge("weird_values", "inf and tiny", ["k"], registry=reg).labels("a").set(float("inf"))
    g = pc.Gauge("neg_inf", "minus infinity", registry=reg)
    g.set(float("-inf"))
    pc.Gauge("tiny", "an exponent", registry=reg).set(1.5e-300)
    h = pc.Histogram("vllm:time_to_first_token_seconds", "TTFT", ["model_name"], buckets=[0.001, 0.5, 10], registry=reg)
    for v in (0.0005, 0.2, 3, 30):
        h.labels("m").observe(v)
    s = pc.Summary("request_latency_seconds", "latency", registry=reg)
    s.observe(1.25)
    pc.Info("vllm:cache_config", "cache config", registry=reg).info({"block_size": "16", "cache_dtype": "auto"})
    pc.Enum("engine_state", "state", states=["starting", "running"], registry=reg).state("running")
    text = pc.generate_latest(reg).decode()
    want = []
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            want.append((smp.name, tuple(sorted(smp.labels.items())), smp.value))
    with tempfile.NamedTemporaryFile("w", suffix=".prom", delete=False, encoding="utf-8") as f:
        f.write(text)
    ours = json.loads(subprocess.run([TOOL, f.name], check=True, capture_output=True, text=True).stdout)
    os.unlink(f.name)
    got = [(x["name"], tuple(sorted(x["labels"].items())), float(x["value"]) if x["v"] is None else x["v"]) for x in ours["samples"]]

    def key(t):
        return (t[0], t[1])

    def same(a, b):
        return a == b or (math.isnan(a) and math.isnan(b)) or (math.isinf(a) and a == b) or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    fails = []
    if ours["errors"]:
        fails.append("our parser reported %d errors: %s" % (ours["errors"], ours["first_error"]))
    gm, wm = {key(t): t[2] for t in got}, {key(t): t[2] for t in want}
    if set(gm) != set(wm):
        fails.append("sample sets differ: only ours %s, only theirs %s" % (sorted(set(gm) - set(wm))[:5], sorted(set(wm) - set(gm))[:5]))
    for k in set(gm) & set(wm):
        if not same(gm[k], wm[k]):
            fails.append("%s: ours %r, theirs %r" % (k, gm[k], wm[k]))
    types = ours["types"]
    if types.get("vllm:kv_cache_usage_perc") != "gauge" or types.get("vllm:time_to_first_token_seconds") != "histogram":
        fails.append("types %r" % types)
    print("%d samples compared (prometheus_client %s)" % (len(want), getattr(pc, "__version__", "?")))
    if fails:
        print("FAIL: " + "\n  ".join(fails[:20]))
        sys.exit(1)
    print("PASS our parser reads prometheus_client's text as prometheus_client does")


if __name__ == "__main__":
    main()
