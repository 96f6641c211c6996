#!/usr/bin/env python3
"""Checks that every relative Markdown link in README.md and docs/*.md resolves: the file exists
and, for a link into a .md file with a #fragment, a heading with that GitHub-style anchor exists.
External links (http:, mailto:, ...), links that leave the repository (../shared) and links
inside fenced code blocks are skipped.
Usage: python3 scripts/check_doc_links.py [REPO_ROOT]; exit status 1 if any link is broken."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
files = [root / 'README.md'] + sorted((root / 'docs').glob('*.md'))


def slug(heading):
    heading = re.sub(r'[^\w\- ]', '', heading.strip().lower())
    return heading.replace(' ', '-')


def anchors(path):
    found, in_code = set(), False
    for line in path.read_text(encoding='utf-8').split('\n'):
        if line.startswith('```'):
            in_code = not in_code
        match = not in_code and re.match(r'^#{1,6} (.*)', line)
        if match:
            found.add(slug(match.group(1)))
    return found


checked = broken = outside = 0
for f in files:
    text = re.sub(r'```.*?```', '', f.read_text(encoding='utf-8'), flags=re.S)
    for match in re.finditer(r'\]\(([^)\s]+)\)', text):
        target = match.group(1)
        checked += 1
        if re.match(r'^[a-z]+:', target):
            continue
        path, _, fragment = target.partition('#')
        dest = (f.parent / path).resolve() if path else f
        if root.resolve() not in dest.parents and dest != root.resolve():
            outside += 1  # e.g. ../shared: not part of the repository
            continue
        if not dest.exists():
            broken += 1
            print(f'{f.relative_to(root)}: missing target {target}')
        elif fragment and dest.suffix == '.md' and fragment not in anchors(dest):
            broken += 1
            print(f'{f.relative_to(root)}: no heading for anchor {target}')
print(f'{checked} links checked, {broken} broken, {outside} outside the repository (skipped)')
sys.exit(1 if broken else 0)
