#!/usr/bin/env python3
"""kvscope vs llama.cpp logits on a real GGUF model (default: the gemma-3-270m Q4_K_M file that
`kvscope-cli pull` fetches), the way ../shared/golden compares: same prompt ids, KV cache f32 in
both engines, flash attention off in llama.cpp, greedy decoding.

Steps
  1. llama.cpp tokenizes --prompt (add_special, parse_special); kvscope's tokenizer is compared
     with it (`generate --prompt TEXT --json` reports the ids it used).
  2. kvscope runs `generate --prompt-ids P -n N --ignore-eos --logits-out F`: its free greedy
     continuation K and the logits of every step.
  3. llama.cpp is teacher-forced on P + K[:-1] in one batch with logits at every position from
     the last prompt token on, so both engines see exactly the same contexts: per step, the
     max |logit difference| and whether llama.cpp's argmax equals kvscope's token.
  4. llama.cpp's own free greedy run (prompt batch, then one token per decode) is compared with K.

    benchmarks/.venv/bin/python benchmarks/golden_real_model.py --kvscope-cli build/app/kvscope-cli \\
        --model ~/.local/share/kvscope/models/gemma-3-270m-q4_k_m.gguf -n 32
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_PROMPT = "The history of the printing press begins in"


class LlamaCpp:
    def __init__(self, model: Path, threads: int, n_ctx: int, repack: bool = False):
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()

        @L.llama_log_callback
        def _quiet(level, text, user_data):  # noqa: ARG001
            pass

        self._cb = _quiet
        L.llama_log_set(_quiet, ctypes.c_void_p(0))
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        # Weight repacking (the CPU "extra buffer types", q4_K -> q4_K_8x8 ...) switches to
        # other kernels for some batch shapes, with their own activation rounding: off by default,
        # so llama.cpp uses the plain vec-dot path that kvscope emulates.
        mp.use_extra_bufts = repack
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
        cp.flash_attn_type = 0  # disabled
        cp.type_k = 0  # GGML_TYPE_F32, like kvscope's default KV cache
        cp.type_v = 0
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama_init_from_model failed")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.mem = L.llama_get_memory(self.ctx)

    def tokenize(self, text: str) -> list[int]:
        b = text.encode()
        buf = (self.L.llama_token * (len(b) + 16))()
        n = self.L.llama_tokenize(self.vocab, b, len(b), buf, len(buf), True, True)
        if n < 0:
            raise RuntimeError("llama_tokenize failed")
        return list(buf[:n])

    def _logits(self, i: int) -> np.ndarray:
        p = self.L.llama_get_logits_ith(self.ctx, i)
        return np.ctypeslib.as_array(p, shape=(self.n_vocab,)).astype(np.float64).copy()

    def forced(self, toks: list[int], first_out: int) -> list[np.ndarray]:
        """One batch over toks; logits for positions first_out..len-1."""
        L = self.L
        L.llama_memory_clear(self.mem, True)
        batch = L.llama_batch_init(len(toks), 0, 1)
        try:
            for i, t in enumerate(toks):
                batch.token[i] = t
                batch.pos[i] = i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if i >= first_out else 0
            batch.n_tokens = len(toks)
            if L.llama_decode(self.ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            return [self._logits(i) for i in range(first_out, len(toks))]
        finally:
            L.llama_batch_free(batch)

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        L = self.L
        L.llama_memory_clear(self.mem, True)
        out: list[int] = []
        toks = prompt
        for _ in range(n):
            arr = (L.llama_token * len(toks))(*toks)
            if L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(toks))) != 0:
                raise RuntimeError("llama_decode failed")
            lg = self._logits(-1)
            tok = int(np.argmax(lg))  # lowest id wins a tie, like llama_sampler_greedy
            out.append(tok)
            toks = [tok]
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvscope-cli", type=Path, default=HERE.parent / "build" / "app" / "kvscope-cli")
    ap.add_argument("--model", type=Path, default=Path(os.path.expanduser("~/.local/share/kvscope/models/gemma-3-270m-q4_k_m.gguf")))
    ap.add_argument("--prompt", default=DEFAULT_PROMPT)
    ap.add_argument("-n", type=int, default=32, help="greedy tokens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--repack", action="store_true", help="let llama.cpp repack weights (its default)")
    args = ap.parse_args()

    ll = LlamaCpp(args.model, args.threads, 512, args.repack)
    prompt = ll.tokenize(args.prompt)

    def kv(extra: list[str]) -> dict:
        r = subprocess.run([str(args.kvscope_cli), "generate", "--model", str(args.model), "--threads", str(args.threads),
                            "--json", "--ignore-eos"] + extra, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"kvscope-cli failed: {r.stderr.strip()}")
        return json.loads(r.stdout)

    kv_tok = kv(["--prompt", args.prompt, "-n", "1"])["prompt_tokens"]
    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / "logits.bin"
        res = kv(["--prompt-ids", ",".join(map(str, prompt)), "-n", str(args.n), "--logits-out", str(f)])
        kv_logits = np.fromfile(f, dtype="<f4").astype(np.float64).reshape(-1, ll.n_vocab)
    K = res["tokens"]
    ref = ll.forced(prompt + K[:-1], len(prompt) - 1)
    steps = []
    for i, (a, b) in enumerate(zip(kv_logits, ref)):
        top = np.argsort(-b)[:2]
        steps.append({"step": i, "max_abs_diff": float(np.abs(a - b).max()), "rms_diff": float(np.sqrt(np.mean((a - b) ** 2))),
                      "logit_std": float(b.std()), "kvscope_token": int(K[i]), "llama_argmax": int(top[0]),
                      "llama_margin": float(b[top[0]] - b[top[1]])})
    # llama.cpp against itself: the same forced batch with weight repacking on (its default
    # kernels) vs off. On a real model this is the noise floor kvscope should be judged against.
    ll2 = LlamaCpp(args.model, args.threads, 512, not args.repack)
    ref2 = ll2.forced(prompt + K[:-1], len(prompt) - 1)
    self_diff = [float(np.abs(a - b).max()) for a, b in zip(ref, ref2)]
    self_agree = sum(int(np.argmax(a)) == int(np.argmax(b)) for a, b in zip(ref, ref2))
    free = ll.greedy(prompt, args.n)
    first_diff = next((i for i, (x, y) in enumerate(zip(free, K)) if x != y), None)
    agree = sum(s["kvscope_token"] == s["llama_argmax"] for s in steps)
    summary = {
        "model": str(args.model), "prompt": args.prompt, "prompt_ids": prompt, "n_prompt": len(prompt),
        "tokenizer_agrees": kv_tok == prompt, "kvscope_prompt_ids": kv_tok,
        "n_steps": len(steps), "max_abs_logit_diff": max(s["max_abs_diff"] for s in steps),
        "mean_max_abs_logit_diff": float(np.mean([s["max_abs_diff"] for s in steps])),
        "max_rms_logit_diff": max(s["rms_diff"] for s in steps), "logit_std": float(np.mean([s["logit_std"] for s in steps])),
        "teacher_forced_argmax_agreement": f"{agree}/{len(steps)}",
        "llama_cpp_repack_on_vs_off_max_abs_logit_diff": max(self_diff),
        "llama_cpp_repack_on_vs_off_argmax_agreement": f"{self_agree}/{len(steps)}",
        "free_greedy_identical": first_diff is None, "free_greedy_first_difference": first_diff,
        "kvscope_tokens": K, "llama_tokens": free, "steps": steps,
    }
    if args.json_out:
        args.json_out.write_text(json.dumps(summary, indent=1))
    brief = {k: v for k, v in summary.items() if k not in ("steps", "prompt_ids", "kvscope_prompt_ids")}
    print(json.dumps(brief, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
