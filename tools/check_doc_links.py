#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown files: the file exists, and an anchor
(#name) names a heading of it, as GitHub spells heading anchors. Exits 1 listing broken links.
  tools/check_doc_links.py [FILE.md ...]     (default: README.md, docs/*.md, bench/NOTES*.md)
"""
import glob
import os
import re
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def slug(heading):
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    names, counts, fenced = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            base = slug(m.group(1))
            n = counts.get(base, 0)
            counts[base] = n + 1
            names.add(base if n == 0 else f"{base}-{n}")
    return names


def links(path):
    fenced = False
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            yield number, target


files = sys.argv[1:] or ["README.md", *sorted(glob.glob("docs/*.md", root_dir=root)),
                         *sorted(glob.glob("bench/NOTES*.md", root_dir=root))]
broken = []
for name in files:
    path = os.path.join(root, name)
    for number, target in links(path):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            broken.append(f"{name}:{number}: {target}: no such file")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            broken.append(f"{name}:{number}: {target}: no heading #{anchor}")
for line in broken:
    print(line)
print(f"{len(files)} files, {len(broken)} broken links")
sys.exit(1 if broken else 0)
