#!/usr/bin/env python3
"""Lists functions in a source tree longer than N lines (default 80): python3 scripts/check_function_length.py core [N].

A heuristic for this code base's style (definitions start in column 0 and end with a "}" there);
the house rule is that none in core/ exceeds ~80 lines without a reason written beside it."""
import re,sys,pathlib
root=pathlib.Path(sys.argv[1])
lim=int(sys.argv[2]) if len(sys.argv)>2 else 80
for p in sorted(root.rglob('*.cpp'))+sorted(root.rglob('*.h')):
    L=p.read_text(errors='replace').split('\n')
    i=0
    while i<len(L):
        line=L[i]
        # function definition start: not indented (or namespace-level), ends with '{', has '(' 
        if re.match(r'^[A-Za-z_].*\)\s*(const)?\s*(override)?\s*(noexcept)?\s*(->.*)?\{\s*$',line) or (re.match(r'^[A-Za-z_].*\($',line)) :
            # find opening brace line
            j=i
            while j<len(L) and not L[j].rstrip().endswith('{'): j+=1
            # find closing '}' at column 0
            k=j+1
            while k<len(L) and not L[k].startswith('}'): k+=1
            n=k-i+1
            if n>lim and not line.startswith(('namespace','struct','class','enum')):
                print(f"{n:4d} {p}:{i+1}: {line.strip()[:90]}")
            i=k+1
        else: i+=1
