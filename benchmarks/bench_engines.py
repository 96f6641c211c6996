"""The engines compare_llamacpp.py times: kvscope-cli as a subprocess, and llama.cpp through
llama-cpp-python's or xllamacpp's bindings in this process (make_llama picks one)."""
from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def git_rev() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except Exception:  # noqa: BLE001
        return "unknown"


# ----------------------------------------------------------------------------------------------
# kvscope

class KvscopeEngine:
    """Runs kvscope-cli as a subprocess.

    Timing uses `kvscope-cli bench --reps 1`: the CLI does one untimed warm-up run (page-faults the
    mmapped weights, warms caches) and then one timed run in the same process, like llama.cpp's
    already-loaded context gets.  `bench` draws its own seeded prompt of the same length (BOS first,
    uniform ids) -- with fixed shapes the content of the prompt does not change the work done.
    With --kvscope-timing generate, `kvscope-cli generate --prompt-ids` is timed instead: the very same
    ids as llama.cpp, but in a cold process (the first step pays the page faults of the weights).
    The greedy tokens for the sanity check always come from `generate --prompt-ids`.
    """

    name = "kvscope"

    def __init__(self, cli: Path, model: Path, threads: int, timing: str, env: dict | None = None, name: str = "kvscope"):
        self.cli, self.model, self.threads, self.timing = cli, model, threads, timing
        self.env, self.name = env or {}, name

    def _run(self, args: list[str]) -> dict:
        cmd = [str(self.cli)] + args
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **self.env})
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({p.returncode}):\n{p.stderr[-2000:]}")
        out = p.stdout.strip()
        return json.loads(out[out.index("{"):])

    def describe(self) -> dict:
        j = self._run(["inspect", "--json", str(self.model)])
        cfg = j.get("model_config", {})
        md = j.get("metadata", {})
        tensors = {t["name"]: t["bytes"] for t in j.get("tensors", [])}
        # Weight bytes one decode step reads: every matrix once; the token embedding only when it
        # doubles as the output matrix (tied), otherwise one row of it (negligible); of an MoE
        # layer's stacked routed experts (`*_exps`) only the expert_used_count of expert_count a
        # token is routed to.
        n_exp, n_used = cfg.get("n_expert") or 0, cfg.get("n_expert_used") or 0
        routed = n_used / n_exp if n_exp and n_used else 1.0
        per_token = sum(b * (routed if "_exps." in n else 1.0) for n, b in tensors.items() if n != "token_embd.weight")
        if "output.weight" not in tensors:
            per_token += tensors.get("token_embd.weight", 0)
        return {"n_params": j.get("n_params"), "n_vocab": cfg.get("n_vocab"), "bos": md.get("tokenizer.ggml.bos_token_id", 1),
                "file_size": j.get("file_size"), "decode_bytes_per_token": int(per_token)}

    def batched(self, batches: str, gen: int) -> dict:
        j = self._run(["bench", "--model", str(self.model), "--no-single", "--no-paging", "--batches", batches,
                       "--gen", str(gen), "--reps", "1", "--threads", str(self.threads)])
        return {str(b["batch"]): b["tokens_per_s"] for b in j["batch"]}

    def generate(self, prompt: list[int], n: int) -> dict:
        return self._run(["generate", "--model", str(self.model), "--prompt-ids", ",".join(map(str, prompt)),
                          "-n", str(n), "--ignore-eos", "--json", "--threads", str(self.threads)])

    def timed(self, prompt: list[int], gen: int) -> dict:
        if self.timing == "generate":
            j = self.generate(prompt, gen)
            assert j["n_generated"] == gen, j
        else:
            # The whole prompt in one step, as llama.cpp gets it (n_batch = n_ubatch = n_ctx).
            j = self._run(["bench", "--model", str(self.model), "--prompt-len", str(len(prompt)), "--gen", str(gen),
                           "--reps", "1", "--threads", str(self.threads),
                           "--max-batched-tokens", str(max(512, len(prompt)))])
        return {"prefill_tokens_per_s": j["prefill_tokens_per_s"], "decode_tokens_per_s": j["decode_tokens_per_s"]}

    def version(self) -> dict:
        mtime = _dt.datetime.fromtimestamp(self.cli.stat().st_mtime, _dt.timezone.utc)
        return {"cli": str(self.cli), "cli_built_utc": mtime.isoformat(timespec="seconds"),
                "git_head_at_run": git_rev(), "timing": self.timing, "env": self.env}


# ----------------------------------------------------------------------------------------------
# llama.cpp through llama-cpp-python (low-level C API)

class LlamaCppPythonEngine:
    name = "llama-cpp-python"

    def __init__(self, model: Path, threads: int, n_ctx: int):
        import ctypes

        import llama_cpp as L

        self.L, self.ct = L, ctypes
        L.llama_backend_init()
        self._quiet()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(str(model).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {model}")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_ctx
        cp.n_ubatch = n_ctx
        cp.n_seq_max = 1
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.no_perf = False
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama_init_from_model failed")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.mem = L.llama_get_memory(self.ctx)
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
        self.smpl = chain
        self.threads = threads

    def _quiet(self):
        L, ct = self.L, self.ct

        @L.llama_log_callback
        def _cb(level, text, user_data):  # noqa: ARG001
            pass

        self._log_cb = _cb  # keep alive
        L.llama_log_set(_cb, ct.c_void_p(0))

    def _decode(self, toks: list[int]):
        arr = (self.L.llama_token * len(toks))(*toks)
        rc = self.L.llama_decode(self.ctx, self.L.llama_batch_get_one(arr, len(toks)))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def run(self, prompt: list[int], gen: int) -> tuple[list[int], float, float, dict]:
        L = self.L
        L.llama_memory_clear(self.mem, True)
        L.llama_sampler_reset(self.smpl)
        L.llama_perf_context_reset(self.ctx)
        out = []
        t0 = time.perf_counter()
        self._decode(prompt)
        tok = L.llama_sampler_sample(self.smpl, self.ctx, -1)
        t1 = time.perf_counter()
        out.append(tok)
        for _ in range(gen - 1):
            self._decode([tok])
            tok = L.llama_sampler_sample(self.smpl, self.ctx, -1)
            out.append(tok)
        t2 = time.perf_counter()
        pd = L.llama_perf_context(self.ctx)
        perf = {"t_p_eval_ms": pd.t_p_eval_ms, "n_p_eval": pd.n_p_eval, "t_eval_ms": pd.t_eval_ms, "n_eval": pd.n_eval}
        return out, t1 - t0, t2 - t1, perf

    def generate(self, prompt: list[int], n: int) -> list[int]:
        return self.run(prompt, n)[0]

    def first_logits(self, prompt: list[int], n_vocab: int) -> list[float]:
        self.L.llama_memory_clear(self.mem, True)
        self._decode(prompt)
        p = self.L.llama_get_logits_ith(self.ctx, -1)
        return [p[i] for i in range(n_vocab)]

    def timed(self, prompt: list[int], gen: int) -> dict:
        out, tp, td, perf = self.run(prompt, gen)
        r = {"prefill_tokens_per_s": len(prompt) / tp, "decode_tokens_per_s": (gen - 1) / td}
        # llama.cpp's own counters (graph compute only, no sampling) as a cross-check
        if perf["t_p_eval_ms"] > 0:
            r["engine_prompt_eval_tokens_per_s"] = perf["n_p_eval"] / perf["t_p_eval_ms"] * 1e3
        if perf["t_eval_ms"] > 0:
            r["engine_eval_tokens_per_s"] = perf["n_eval"] / perf["t_eval_ms"] * 1e3
        return r

    def version(self) -> dict:
        import importlib.metadata as md
        return {"package": "llama-cpp-python", "version": md.version("llama_cpp_python"),
                "system_info": self.L.llama_print_system_info().decode().strip()}

    def close(self):
        L = self.L
        L.llama_sampler_free(self.smpl)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)


# ----------------------------------------------------------------------------------------------
# llama.cpp through xllamacpp (embedded llama.cpp server)

class XllamacppEngine:
    name = "xllamacpp"

    def __init__(self, model: Path, threads: int, n_ctx: int):
        import xllamacpp as xlc

        self.xlc = xlc
        p = xlc.CommonParams()
        p.model.path = str(model)
        p.n_ctx = n_ctx
        p.n_parallel = 1
        p.cpuparams.n_threads = threads
        p.cpuparams_batch.n_threads = threads
        p.cache_prompt = False
        p.verbosity = -1
        self.server = xlc.Server(p)

    def _complete(self, prompt: list[int], n: int, logprobs: bool = False) -> dict:
        req = {"prompt": prompt, "n_predict": n, "max_tokens": n, "ignore_eos": True, "temperature": 0.0,
               "top_k": 1, "samplers": ["top_k"], "cache_prompt": False}
        if logprobs:
            req["logprobs"] = 1
        r = self.server.handle_completions(req)
        if isinstance(r, str):
            r = json.loads(r)
        if "error" in r:
            raise RuntimeError(f"xllamacpp: {r['error']}")
        return r

    def generate(self, prompt: list[int], n: int) -> list[int]:
        r = self._complete(prompt, n, logprobs=True)
        content = r["choices"][0]["logprobs"]["content"]
        return [int(c["id"]) for c in content]

    def timed(self, prompt: list[int], gen: int) -> dict:
        t = self._complete(prompt, gen)["timings"]
        assert t["prompt_n"] == len(prompt) and t["predicted_n"] == gen, t
        # The server starts its generation clock after the first token is sampled, so predicted_ms
        # covers gen-1 decode steps although predicted_n == gen: use gen-1 like kvscope does.
        return {"prefill_tokens_per_s": t["prompt_n"] / t["prompt_ms"] * 1e3,
                "decode_tokens_per_s": (t["predicted_n"] - 1) / t["predicted_ms"] * 1e3}

    def version(self) -> dict:
        return {"package": "xllamacpp", "version": self.xlc.__version__, "system_info": self.xlc.get_system_info().strip()}

    def close(self):
        del self.server


def make_llama(kind: str, model: Path, threads: int, n_ctx: int):
    if kind == "auto":
        try:
            import llama_cpp  # noqa: F401
            kind = "llama-cpp-python"
        except ImportError:
            kind = "xllamacpp"
    if kind == "llama-cpp-python":
        return LlamaCppPythonEngine(model, threads, n_ctx)
    if kind == "xllamacpp":
        return XllamacppEngine(model, threads, n_ctx)
    raise SystemExit(f"unknown --llama {kind}")
