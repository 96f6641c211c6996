#!/usr/bin/env python3
"""Quantize ../shared/models/synthetic/synth-llama-f32.gguf with llama.cpp's own quantizer
(llama-cpp-python's llama_model_quantize, no imatrix, so ggml's *_ref quantizers) into the types
that ../shared/models/synthetic has no file for. test_dtypes compares kvscope's quantize_row
with these bytes when KVSCOPE_QUANT_REF_DIR points at the output directory:

    benchmarks/.venv/bin/python tests/tools/make_quant_refs.py --out /tmp/quant-refs
    KVSCOPE_QUANT_REF_DIR=/tmp/quant-refs ctest --test-dir build -R dtypes --output-on-failure
"""
import argparse
import pathlib
import sys

import llama_cpp

# llama_ftype values (llama.h): the file-level recipe names llama-quantize accepts.
FTYPES = {"q4_1": 3, "q5_0": 8, "q5_1": 9, "q5_k_m": 17}


def main() -> int:
    here = pathlib.Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=str(here.parent / "shared/models/synthetic/synth-llama-f32.gguf"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, ftype in FTYPES.items():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.nthread = 2
        dst = out / f"synth-llama-{name}.gguf"
        rc = llama_cpp.llama_model_quantize(args.src.encode(), str(dst).encode(), params)
        if rc != 0:
            print(f"llama_model_quantize({name}) failed: {rc}", file=sys.stderr)
            return 1
        print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
