#!/usr/bin/env python3
"""Fails when a file includes a header from a layer above its own (an upward include).

The link graph (each folder its own library, linking only the layers below it) already keeps
calls from going up; this script also catches what a linker cannot see: an upward include of a
header-only type or inline function, and Qt, CUDA or the backend factory named where they must
not be. Run: python3 scripts/check_layers.py [repo root]   (ctest runs it as `include_layers`).

The floors, lowest first:
  core/     types gguf kv | model telemetry | workload chat | engine   (no Qt, no CUDA, no backend)
  cpu/ cuda/                 the backends, behind engine/backend.h; peers: neither includes the other
  backends/                  the one factory that chooses cpu/ or cuda/
  run/                       drivers above the backends (evals, workload replay)
  kv_events/ -> serve/, attach/ -> ui/, app/
"""
import pathlib
import re
import sys

CORE_LAYERS = [
    {"types", "gguf", "kv", "jinja"},  # vocabulary, file format, block bookkeeping, chat-template Jinja
    {"model", "telemetry"},    # model config/weights/tokenizers; snapshots and block events
    {"workload", "chat"},      # scenario files; chat templates and conversations
    {"engine"},                # backend interface, scheduler, step loop, snapshot building
]
LEVEL = {folder: i for i, layer in enumerate(CORE_LAYERS) for folder in layer}
CORE = set(LEVEL)
# What each top-level room may include, by the include's first path part ("kv/..." -> kv) or,
# for the factory, its file name. Its own room is always allowed. ui/ and app/ may use anything.
ROOMS = {
    "cpu": CORE,
    "cuda": CORE,
    "backends": CORE | {"cpu", "backend_factory.h"},
    "run": CORE | {"cpu", "backend_factory.h"},
    "kv_events": set(),
    "serve": CORE | {"kv_events", "cpu", "run", "backend_factory.h"},
    "attach": {"kv_events"},
}
PROJECT_HEADS = CORE | set(ROOMS) | {"ui", "app", "backend_factory.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
QT = re.compile(r"^(Q[A-Za-z]+|qcustomplot\.h)$")
CUDA = re.compile(r"^(cuda_runtime.*|cuda_backend\.h|cublas.*)$")
CUDA_ROOMS = {"cuda", "backends"}  # the backend and the factory that builds it
SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh")


def sources(folder: pathlib.Path):
    return [p for p in sorted(folder.rglob("*")) if p.suffix in SOURCE_SUFFIXES]


def includes(path: pathlib.Path):
    return INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace"))


def core_problems(root: pathlib.Path):
    core = root / "core"
    for path in sources(core):
        rel = path.relative_to(core)
        folder = rel.parts[0] if len(rel.parts) > 1 else None
        if folder not in LEVEL:
            yield f"{path}: folder core/{folder} has no layer in scripts/check_layers.py"
            continue
        for inc in includes(path):
            head = inc.split("/")[0]
            if QT.match(inc) or CUDA.match(inc) or inc == "backend_factory.h":
                yield f"core/{rel}: includes <{inc}>: core knows no Qt, CUDA or backend factory"
            elif "/" in inc and head in PROJECT_HEADS and head not in CORE:
                yield f"core/{rel}: includes {inc}: {head}/ is above core"
            elif "/" in inc and head in LEVEL and head != folder and LEVEL[head] >= LEVEL[folder]:
                yield (f"core/{rel}: includes {inc}: core/{head} (layer {LEVEL[head]}) is not below "
                       f"core/{folder} (layer {LEVEL[folder]})")


def room_problems(root: pathlib.Path):
    for room, allowed in ROOMS.items():
        folder = root / room
        if not folder.is_dir():
            continue
        for path in sources(folder):
            rel = path.relative_to(root)
            for inc in includes(path):
                head = inc.split("/")[0] if "/" in inc else inc
                if QT.match(inc):
                    yield f"{rel}: includes <{inc}>: only ui/ (and the app and GUI tests) name Qt"
                elif CUDA.match(inc) and room not in CUDA_ROOMS:
                    yield f"{rel}: includes <{inc}>: only cuda/ and backends/ name CUDA"
                elif head in PROJECT_HEADS and head != room and head not in allowed:
                    yield f"{rel}: includes {inc}: {room}/ may not use {head}"


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    found = list(core_problems(root)) + list(room_problems(root))
    for p in found:
        print(p)
    print(f"include layers: {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
