"""Every test vector of llama.cpp's vocabulary files (models/ggml-vocab-*.gguf with .inp/.out:
strings separated by "\\n__ggml_vocab_test__\\n", one line of ids each, as llama.cpp's
tests/test-tokenizer-0 reads them: add_special off, parse_special off) through
`kvscope-cli tokenize --jsonl` (all of a vocabulary's strings in one run). The ids must be identical.

usage: vocab_peer.py KVSCOPE_CLI VOCAB_DIR
Vocabularies in EXPECTED_FAILURES must fail (each with the reason); the test fails when one of
them starts passing (move it out of the list) or when any other vocabulary fails.
"""
import json
import os
import subprocess
import sys
import tempfile

SEP = "\n__ggml_vocab_test__\n"

# vocabulary -> why kvscope does not match llama.cpp on it yet.
EXPECTED_FAILURES = {
    "bert-bge": "a WordPiece vocabulary (tokenizer.ggml.model 'bert') of an embedding model; kvscope runs "
                "generative models and does not implement WordPiece",
}


def cases(vocab):
    raw = open(vocab + ".inp", "rb").read().decode("utf-8")
    inputs = raw.split(SEP)
    if inputs and inputs[-1].endswith("\n__ggml_vocab_test__"):
        inputs[-1] = inputs[-1][: -len("\n__ggml_vocab_test__")]
    outputs = [line.strip() for line in open(vocab + ".out", encoding="utf-8").read().split("\n")]
    outputs = outputs[: len(inputs)]
    return [(i, [int(t) for t in o.split()]) for i, o in zip(inputs, outputs)]


def run(cli, vocab):
    tests = cases(vocab)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "texts.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for text, _ in tests:
                f.write(json.dumps(text) + "\n")
        p = subprocess.run([cli, "tokenize", "--model", vocab, "--text-file", path, "--jsonl", "--no-add-special"],
                           capture_output=True)
    if p.returncode != 0:
        return [f"exit {p.returncode}: {p.stderr.decode('utf-8', 'replace').strip()[-300:]}"]
    got = [json.loads(line)["tokens"] for line in p.stdout.decode("utf-8").splitlines()]
    return [f"case {n} {text[:40]!r}: got {g[:12]} want {want[:12]}"
            for n, ((text, want), g) in enumerate(zip(tests, got)) if g != want] + \
           ([f"{len(got)} results for {len(tests)} texts"] if len(got) != len(tests) else [])


def main():
    cli, vdir = sys.argv[1], sys.argv[2]
    vocabs = sorted(os.path.join(vdir, f) for f in os.listdir(vdir)
                    if f.startswith("ggml-vocab-") and f.endswith(".gguf") and os.path.exists(os.path.join(vdir, f + ".inp")))
    failed, unexpected = [], []
    for v in vocabs:
        name = os.path.basename(v)[len("ggml-vocab-"):-len(".gguf")]
        bad = run(cli, v)
        n = len(cases(v))
        print(f"{name}: {n - len(bad) if bad and not bad[0].startswith('exit') else (0 if bad else n)}/{n} identical"
              + (f"  first: {bad[0]}" if bad else ""))
        if bad and name not in EXPECTED_FAILURES:
            failed.append(name)
        if not bad and name in EXPECTED_FAILURES:
            unexpected.append(name)
    if failed or unexpected:
        print(f"FAIL: {failed} differ from llama.cpp; {unexpected} pass but are listed as expected failures")
        sys.exit(1)
    print(f"vocab_peer: {len(vocabs)} vocabularies, every vector identical except the listed ones")


if __name__ == "__main__":
    main()
