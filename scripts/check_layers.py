#!/usr/bin/env python3
"""Fails when a file includes a header from a layer above its own (an upward include).

core/ is layered (lowest first); a file may include its own folder and folders of lower
layers only, so core's include graph has no cycles. Above core: cuda/ and backends/ (may use
core), ui/ and app/ (may use everything below them); core never names Qt, CUDA or the UI.
Run: python3 scripts/check_layers.py [repo root]   (ctest runs it as `include_layers`).
"""
import pathlib
import re
import sys

CORE_LAYERS = [
    {"types", "gguf", "kv"},   # vocabulary, file format, block bookkeeping: depend on nothing
    {"model", "telemetry"},    # model config/weights/tokenizers; snapshots and block events
    {"workload", "chat"},      # scenario files; chat templates and conversations
    {"engine"},                # backend interface, scheduler, step loop, snapshot building
    {"cpu"},                   # the CPU backend (implements engine/backend.h)
    {"run"},                   # drivers above the backends: perplexity, workload replay
]
LEVEL = {folder: i for i, layer in enumerate(CORE_LAYERS) for folder in layer}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
FORBIDDEN_IN_CORE = re.compile(r"^(Q[A-Za-z]+|qcustomplot\.h|cuda_backend\.h|cuda_runtime.*|backend_factory\.h)$")


def problems(root: pathlib.Path):
    core = root / "core"
    for path in sorted(core.rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        rel = path.relative_to(core)
        folder = rel.parts[0] if len(rel.parts) > 1 else None
        if folder not in LEVEL:
            yield f"{path}: folder core/{folder} has no layer in scripts/check_layers.py"
            continue
        for inc in INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
            head = inc.split("/")[0]
            if FORBIDDEN_IN_CORE.match(inc):
                yield f"core/{rel}: includes <{inc}>: core knows no Qt, CUDA or backend factory"
            elif "/" in inc and head in LEVEL and head != folder and LEVEL[head] >= LEVEL[folder]:
                yield (f"core/{rel}: includes {inc}: core/{head} (layer {LEVEL[head]}) is not below "
                       f"core/{folder} (layer {LEVEL[folder]})")


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    found = list(problems(root))
    for p in found:
        print(p)
    print(f"include layers: {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
