"""kvscope's dequantizers against the gguf package's numpy ones (gguf.quants, PyPI).

Random blocks of every type listed below (random bytes, with each f16 scale field replaced by
a random finite half, subnormals and zeros included) go through both; every float must have the
same bits. With KVSCOPE_SHARED_DIR set, real tensors of the golden mistral3 quantized files are
compared too, and the MXFP4 experts of the golden gpt-oss file.

usage: test_dequant_peer.py DEQUANT_DUMP UNUSED  (run_peer.sh's CLI and MODEL slots)
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader
from gguf.quants import dequantize

# type -> (block bytes, byte offsets of its f16 fields)
TYPES = {
    Q.Q2_K: (84, [80, 82]),
    Q.Q3_K: (110, [108]),
    Q.IQ4_NL: (18, [0]),
    Q.IQ4_XS: (136, [0]),
    Q.Q4_K: (144, [0, 2]),
    Q.Q5_K: (176, [0, 2]),
    Q.Q6_K: (210, [208]),
    Q.Q8_0: (34, [0]),
    Q.Q4_0: (18, [0]),
    Q.Q4_1: (20, [0, 2]),
    Q.Q5_0: (22, [0]),
    Q.Q5_1: (24, [0, 2]),
    Q.MXFP4: (17, []),  # its E8M0 scale byte stays random: every byte is a finite power of two
}
N_BLOCKS = 2048


def random_halves(rng, n):
    """Finite f16 bit patterns: uniform bits with the all-ones exponent (inf/NaN) redrawn."""
    h = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    bad = (h & 0x7C00) == 0x7C00
    while bad.any():
        h[bad] = rng.integers(0, 1 << 16, int(bad.sum()), dtype=np.uint16)
        bad = (h & 0x7C00) == 0x7C00
    h[: n // 64] &= 0x83FF  # a share of zeros and subnormals
    return h


def random_blocks(rng, qtype):
    size, halves = TYPES[qtype]
    raw = rng.integers(0, 256, (N_BLOCKS, size), dtype=np.uint8)
    for off in halves:
        raw[:, off : off + 2] = random_halves(rng, N_BLOCKS).view(np.uint8).reshape(N_BLOCKS, 2)
    return raw


def ours(dump, qtype, raw, tmp):
    src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    np.ascontiguousarray(raw).tofile(src)
    subprocess.run([dump, str(int(qtype)), src, dst], check=True)
    return np.fromfile(dst, dtype=np.float32)


def compare(label, mine, theirs):
    theirs = np.asarray(theirs, dtype=np.float32).reshape(-1)
    if mine.shape != theirs.shape:
        print(f"FAIL {label}: {mine.size} values, gguf.quants gives {theirs.size}")
        return False
    diff = np.nonzero(mine.view(np.uint32) != theirs.view(np.uint32))[0]
    if diff.size:
        i = diff[0]
        print(f"FAIL {label}: {diff.size} of {mine.size} values differ; first at {i}: "
              f"kvscope {mine[i]!r} vs gguf.quants {theirs[i]!r}")
        return False
    print(f"ok   {label}: {mine.size} values bit-identical")
    return True


GOLDEN_QUANT_FILES = [f"mistral3-dense-{name}.gguf" for name in ["q2_k", "q3_k_m", "iq4_xs", "iq4_nl"]] + [
    "gpt-oss-moe-mxfp4_moe.gguf"]


def real_tensors(dump, tmp):
    shared = os.environ.get("KVSCOPE_SHARED_DIR", "")
    folder = os.path.join(shared, "golden", "archs", "models")
    ok = True
    for name in GOLDEN_QUANT_FILES:
        path = os.path.join(folder, name)
        if not shared or not os.path.exists(path):
            print(f"note: {path} not found, real tensors of {name} not compared")
            continue
        for t in GGUFReader(path).tensors:
            if t.tensor_type in TYPES:
                raw = np.asarray(t.data).view(np.uint8).reshape(-1)
                ok &= compare(f"{os.path.basename(path)}:{t.name} ({t.tensor_type.name})",
                              ours(dump, t.tensor_type, raw, tmp), dequantize(raw, t.tensor_type))
    return ok


def main():
    dump = sys.argv[1]
    rng = np.random.default_rng(20261204)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for qtype in TYPES:
            raw = random_blocks(rng, qtype)
            ok &= compare(f"random {qtype.name}", ours(dump, qtype, raw, tmp), dequantize(raw, qtype))
        ok &= real_tensors(dump, tmp)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
