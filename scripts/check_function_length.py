#!/usr/bin/env python3
"""Lists C++ and CUDA functions longer than a limit; exits 1 when one is not excused.

    python3 scripts/check_function_length.py [--limit N] [--report-only] DIR [DIR...]

The house rule: no function over 80 lines (signature to closing brace, blank lines and comments
included) unless a comment on the line just above its signature says why, in the form
`// long-function: <reason>`. ctest runs this (`function_length`) on the engine's floors; the GUI
and CLI front ends are listed with --report-only.

The scan is a brace matcher over the source with comments, strings and preprocessor lines
blanked out, so signatures that span several lines, constructors with initializer lists,
`__global__` kernels in .cu files and member functions defined inside a class are all found.
A function is a brace block at namespace or class scope whose header has a parameter list and
is not a class, struct, union, enum, namespace or an initialiser (`= {`).
"""
import argparse
import pathlib
import re
import sys

SUFFIXES = (".cpp", ".h", ".cu", ".cuh")
SCOPE_KEYWORDS = re.compile(r"^(?:template\s*<[^{;]*>\s*)?(?:namespace|class|struct|union|extern\s+\"C\")\b")
NOT_A_FUNCTION = re.compile(r"^(?:template\s*<[^{;]*>\s*)?(?:enum)\b|=\s*$|\b(?:if|for|while|switch|catch|do)\s*\(")
EXCUSE = re.compile(r"//\s*long-function:\s*\S")


def blank_out(text: str) -> str:
    """Comments, string/char literals and preprocessor lines become spaces; newlines stay."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":  # preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if c in " \t":
            out.append(c)
            i += 1
            continue
        at_line_start = c == "\n"
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                close = ")" + m.group(1) + '"'
                end = text.find(close, i + m.end())
                end = n if end < 0 else end + len(close)
                out.append(re.sub(r"[^\n]", " ", text[i:end]))
                i = end
            else:
                out.append(c)
                i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text: str):
    """Yields (first line, last line, header) of each function body at namespace/class scope."""
    code = blank_out(text)
    line_of = [0] * (len(code) + 1)
    line = 1
    for i, ch in enumerate(code):
        line_of[i] = line
        if ch == "\n":
            line += 1
    stack = []  # per open brace: "scope" (namespace/class body) or "other"
    header_start = 0
    i = 0
    while i < len(code):
        ch = code[i]
        in_scope = all(kind == "scope" for kind in stack)
        if ch in ";}" and in_scope:
            if ch == "}" and stack:
                stack.pop()
            header_start = i + 1
        elif ch == "{":
            if not in_scope:
                stack.append("other")
            else:
                header = code[header_start:i].strip()
                if SCOPE_KEYWORDS.match(header) and "(" not in header.split("{")[0].split(":")[0]:
                    stack.append("scope")
                    header_start = i + 1
                elif "(" in header and not NOT_A_FUNCTION.search(header):
                    end = matching_brace(code, i)
                    first = line_of[header_start + (len(code[header_start:i]) - len(code[header_start:i].lstrip()))]
                    yield first, line_of[end], " ".join(header.split())
                    i = end + 1
                    header_start = i
                    continue
                else:
                    stack.append("other")
        elif ch == "}":
            if stack:
                stack.pop()
            if all(kind == "scope" for kind in stack):
                header_start = i + 1
        i += 1


def matching_brace(code: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--report-only", action="store_true", help="list, never fail")
    args = ap.parse_args()
    failures = excused = 0
    for d in args.dirs:
        root = pathlib.Path(d)
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES)
        for path in paths:
            text = path.read_text(encoding="utf-8", errors="replace")
            lines = text.split("\n")
            for first, last, header in functions(text):
                n = last - first + 1
                if n <= args.limit:
                    continue
                why = first >= 2 and EXCUSE.search(lines[first - 2])
                tag = "excused" if why else "LONG"
                excused += bool(why)
                failures += not why
                print(f"{n:4d} {tag:7s} {path}:{first}: {header[:90]}")
    print(f"function length: {failures} over {args.limit} lines, {excused} excused")
    return 1 if failures and not args.report_only else 0


if __name__ == "__main__":
    sys.exit(main())
