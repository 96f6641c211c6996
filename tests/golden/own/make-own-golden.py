#!/usr/bin/env python3
"""kvscope's own golden records: models that llama.cpp's fixture generator does not write (YaRN
RoPE, grouped expert routing), written by kvscope's GGUF writer (`kvscope-cli make-model`) and
run through llama.cpp (the llama-logits tool of ../../../../shared/golden/archs/tools, built by
its build-oracle.sh). The records keep the make-model options, not the weights: the test
(tests/cpu/test_golden_own.cpp) writes the same file again, checks its FNV-1a hash, and grades
kvscope teacher-forced against llama.cpp's logits, as golden_archs does.

usage: make-own-golden.py --cli build/app/kvscope-cli --logits /tmp/kvscope-oracle/llama-logits
"""
import argparse, json, os, random, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

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
                args += ["--" + k, str(v)]
            subprocess.run(args, check=True, stderr=subprocess.DEVNULL)
            dump = os.path.join(HERE, case + ".logits.f32")
            cmd = [a.logits, model, str(a.n_predict), "--prompt-ids", ",".join(map(str, prompt)),
                   "--threads", "1", "--flash-attn", "off", "--kv-type", "f32", "--ignore-eos", "--ctx", "512",
                   "--runs", "0", "--dump-logits", dump]
            p = subprocess.run(cmd, capture_output=True)  # token pieces may be bytes of no valid UTF-8
            if p.returncode != 0:
                sys.exit(f"{case}: llama.cpp failed: {p.stderr.decode('utf-8', 'replace').strip()[-600:]}")
            j = json.loads(p.stdout.decode("utf-8", "replace"))
            rec = {"format": "kvscope-golden/1", "case": case, "arch": spec["arch"], "make_model": spec,
                   "model_fnv1a64": fnv1a64(model), "prompt_kind": "token_ids", "prompt_tokens": prompt,
                   "n_prompt": len(prompt), "n_predict": a.n_predict, "tokens": j["tokens"],
                   "logits_file": case + ".logits.f32", "logits_shape": [len(j["tokens"]), j["config"]["n_vocab"]],
                   "logits_dtype": "float32 little-endian, row-major [step][vocab]",
                   "settings": {"flash_attn": "off", "kv_type": "f32", "threads": 1, "n_ctx": j["config"]["ctx"],
                                "sampling": "greedy argmax over raw logits", "add_bos": False, "ignore_eos": True},
                   "llama_cpp": {"source": "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp",
                                 "model_desc": j["config"].get("model_desc")}}
            json.dump(rec, open(os.path.join(HERE, case + ".json"), "w"), indent=1)
            index.append(case)
            print(f"{case}: {j['config'].get('model_desc')} tokens {j['tokens'][:8]}...")
    json.dump({"format": "kvscope-golden/1", "cases": index}, open(os.path.join(HERE, "index.json"), "w"), indent=1)

if __name__ == "__main__":
    main()
