#!/usr/bin/env python3
"""kvscope's own golden records: models that llama.cpp's fixture generator does not write (YaRN
RoPE, grouped expert routing), written by kvscope's GGUF writer (`kvscope-cli make-model`) and
run through llama.cpp (the llama-logits tool of ../../../../shared/golden/archs/tools, built by
its build-oracle.sh). The records keep the make-model options, not the weights: the test
(tests/cpu/test_golden_own.cpp) writes the same file again, checks its FNV-1a hash, and grades
kvscope teacher-forced against llama.cpp's logits, as golden_archs does.

Models with a tanh-GELU (gemma4) get two records, as ../shared/golden's gemma3 has: the stock
llama.cpp CPU backend computes GELU through an f16 lookup table (tolerance 0.03), and a rebuild
with GGML_GELU_FP16 undefined computes it exactly (`<case>.exact-gelu`, tolerance 2e-3, what
kvscope's exact GELU must match). --exact-gelu-lib names the folder of that rebuilt
libggml-cpu.so (build it by commenting out `#define GGML_GELU_FP16` in ggml/src/ggml-cpu/vec.h
and rebuilding the ggml-cpu target; tests/golden/own/README.md).

usage: make-own-golden.py --cli build/app/kvscope-cli --logits /tmp/kvscope-oracle/llama-logits
                          [--exact-gelu-lib /tmp/exact-gelu]
"""
import argparse, json, os, random, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GELU_ARCHS = {"gemma4"}

def fnv1a64(path):
    h = 0xcbf29ce484222325
    with open(path, "rb") as f:
        for b in f.read():
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--logits", required=True)
    ap.add_argument("--n-prompt", type=int, default=40)
    ap.add_argument("--n-predict", type=int, default=24)
    ap.add_argument("--exact-gelu-lib", default="")
    a = ap.parse_args()
    specs = json.load(open(os.path.join(HERE, "specs.json")))
    index = []
    for case, spec in specs["cases"].items():
        rng = random.Random(case)
        prompt = [rng.randrange(3, spec["n-vocab"]) for _ in range(a.n_prompt)]
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, case + ".gguf")
            args = [a.cli, "make-model", "--out", model]
            for k, v in spec.items():
                args += ["--" + k] if v is True else ["--" + k, str(v)]
            subprocess.run(args, check=True, stderr=subprocess.DEVNULL)
            gelu = spec["arch"] in GELU_ARCHS
            if gelu and not a.exact_gelu_lib:
                sys.exit(f"{case}: a GELU model needs --exact-gelu-lib for its exact-GELU record")
            variants = [("", None)] + ([(".exact-gelu", a.exact_gelu_lib)] if gelu else [])
            for suffix, lib in variants:
                name = case + suffix
                dump = os.path.join(HERE, name + ".logits.f32")
                cmd = [a.logits, model, str(a.n_predict), "--prompt-ids", ",".join(map(str, prompt)),
                       "--threads", "1", "--flash-attn", "off", "--kv-type", "f32", "--ignore-eos", "--ctx", "512",
                       "--runs", "0", "--dump-logits", dump]
                env = dict(os.environ, LD_LIBRARY_PATH=lib) if lib else None
                p = subprocess.run(cmd, capture_output=True, env=env)  # pieces may be bytes of no valid UTF-8
                if p.returncode != 0:
                    sys.exit(f"{name}: llama.cpp failed: {p.stderr.decode('utf-8', 'replace').strip()[-600:]}")
                j = json.loads(p.stdout.decode("utf-8", "replace"))
                rec = {"format": "kvscope-golden/1", "case": name, "arch": spec["arch"], "make_model": spec,
                       "model_fnv1a64": fnv1a64(model), "prompt_kind": "token_ids", "prompt_tokens": prompt,
                       "n_prompt": len(prompt), "n_predict": a.n_predict, "tokens": j["tokens"],
                       "logits_file": name + ".logits.f32", "logits_shape": [len(j["tokens"]), j["config"]["n_vocab"]],
                       "logits_dtype": "float32 little-endian, row-major [step][vocab]",
                       "tolerance": 0.03 if gelu and not lib else 2e-3,
                       "settings": {"flash_attn": "off", "kv_type": "f32", "threads": 1, "n_ctx": j["config"]["ctx"],
                                    "sampling": "greedy argmax over raw logits", "add_bos": False, "ignore_eos": True},
                       "llama_cpp": {"source": "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp",
                                     "gelu": ("exact f32 (GGML_GELU_FP16 undefined)" if lib
                                              else "f16 lookup table (stock CPU backend)") if gelu else None,
                                     "model_desc": j["config"].get("model_desc")}}
                json.dump(rec, open(os.path.join(HERE, name + ".json"), "w"), indent=1)
                index.append(name)
                print(f"{name}: {j['config'].get('model_desc')} tokens {j['tokens'][:8]}...")
    json.dump({"format": "kvscope-golden/1", "cases": index}, open(os.path.join(HERE, "index.json"), "w"), indent=1)

if __name__ == "__main__":
    main()
