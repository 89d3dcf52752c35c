#!/usr/bin/env bash
# Import cycles between the gateway's modules.
#
# Reads every file of gateway/src (one module per file; `foo/mod.rs` is `foo`),
# collects each path that names another module of the crate (`use crate::…`,
# `use super::…`, grouped uses expanded, and inline `crate::a::b` paths in code),
# maps it to the longest module prefix that is a file, and prints the strongly
# connected components of that graph that have more than one module, with the
# edges inside each. Exits 1 when there is one, so CI can run it.
#
# Unit tests (`#[cfg(test)] mod tests` and `delivery/tests.rs`) are left out:
# a test may reach anywhere. `--with-tests` keeps them. `--edges` prints every edge.
# A `pub use` re-export is an alias: a path through it counts as an edge to the
# file that defines the item (`--no-reexports`: an edge from the re-exporting
# module to the child instead, the coarser view). A private child module
# (`mod x;`) counts as part of its parent (`--files`: every file on its own).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import os, re, sys

ROOT = "gateway/src"
with_tests = "--with-tests" in sys.argv
show_edges = "--edges" in sys.argv
by_file = "--files" in sys.argv
follow_reexports = "--no-reexports" not in sys.argv

def module_of(rel):
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return "::".join(parts) or "crate"

files = {}
for dirpath, _, names in os.walk(ROOT):
    for n in names:
        if not n.endswith(".rs") or n == "main.rs":
            continue
        rel = os.path.relpath(os.path.join(dirpath, n), ROOT)
        files[module_of(rel)] = os.path.join(dirpath, n)
# a file module `a/b.rs` whose parent is `a.rs` or `a/mod.rs`
TEST_FILES = {"delivery::tests"}
if not with_tests:
    for m in TEST_FILES:
        files.pop(m, None)
modules = set(files)

def strip(text):
    if not with_tests:
        m = re.search(r"^\s*#\[cfg\(test\)\]\s*\n(\s*#\[[^\n]*\]\s*\n)*\s*(pub(\(\w+\))?\s+)?mod tests\b", text, re.M)
        if m:
            text = text[: m.start()]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    return text

def expand(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]"""
    tree = re.sub(r"\s+", "", tree)
    i = tree.find("{")
    if i < 0:
        return [re.sub(r"as\w+$", "", tree)] if tree else []
    prefix, depth, items, start = tree[:i], 0, [], i + 1
    for j in range(i, len(tree)):
        c = tree[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                items.append(tree[start:j])
                break
        elif c == "," and depth == 1:
            items.append(tree[start:j])
            start = j + 1
    out = []
    for it in items:
        if not it:
            continue
        for e in expand(it):
            out.append(prefix + e if e != "self" else prefix.rstrip(":"))
    return out

def resolve(mod, path):
    """(module file the path names, the segments after it), or None"""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = [], segs[1:]
    elif segs[0] in ("super", "self"):
        base = mod.split("::") if mod != "crate" else []
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    elif "::".join((mod.split("::") if mod != "crate" else []) + [segs[0]]) in modules:
        # a path relative to the current module: one of its child modules
        base = mod.split("::") if mod != "crate" else []
    else:
        return None
    for k in range(len(segs), -1, -1):
        cand = "::".join(base + segs[:k]) or "crate"
        if cand in modules:
            return cand, segs[k:]
    return None

USE = re.compile(r"\b(pub(?:\([\w:]+\))?\s+)?use\s+(\w+\s*::[^;]*);")
texts = {mod: strip(open(path).read()) for mod, path in files.items()}

# `pub use child::Item` in a module is an alias, not a dependency: a path to
# `parent::Item` is followed to the file that defines Item.
reexport = {}
for mod, text in texts.items():
    for m in USE.finditer(text):
        if not m.group(1):
            continue
        for p in expand(m.group(2)):
            alias = None
            am = re.match(r"(.*?)\s*\bas\s*(\w+)$", p)
            if am:
                p, alias = am.group(1), am.group(2)
            r = resolve(mod, p)
            if follow_reexports and r and r[1] and r[1][0] != "*":
                reexport[(mod, alias or r[1][-1])] = r[0]

def target(mod, path):
    r = resolve(mod, path)
    if not r:
        return None
    to, rest = r
    seen = 0
    while rest and (to, rest[0]) in reexport and seen < 10:
        to, seen = reexport[(to, rest[0])], seen + 1
    return to

edges = {m: {} for m in modules}
for mod, text in texts.items():
    paths = []
    for m in USE.finditer(text):
        if m.group(1) and follow_reexports:
            continue  # a re-export: see above
        paths += expand(m.group(2))
    body = re.sub(r"\buse\s+[^;]*;", "", text)
    for m in re.finditer(r"(?<![\w:])(\w+(?:::\w+)+)", body):
        paths.append(m.group(1))
    for p in paths:
        p = re.sub(r"\s*\bas\s*\w+$", "", p)
        to = target(mod, p)
        if to and to != mod and to != "crate":
            edges[mod].setdefault(to, p)

# A private child (`mod x;`, not `pub mod x;`) is part of its parent: the
# store's `impl Store` blocks spread over store/*.rs are one module.
def owner(m):
    while not by_file and "::" in m:
        parent, name = m.rsplit("::", 1)
        if re.search(rf"^\s*pub(\([\w:]+\))?\s+mod\s+{name}\s*;", texts.get(parent, ""), re.M):
            break
        m = parent
    return m
merged = {}
for m, tos in edges.items():
    o = owner(m)
    merged.setdefault(o, {})
    for t, why in tos.items():
        if owner(t) != o:
            merged[o].setdefault(owner(t), f"{m}: {why}" if o != m else why)
edges = merged
modules = set(edges)

# Tarjan
index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        sccs.append(sorted(comp))
for v in sorted(modules):
    if v not in index:
        visit(v)

n_edges = sum(len(e) for e in edges.values())
print(f"{len(modules)} modules, {n_edges} edges")
if show_edges:
    for m in sorted(edges):
        for t in sorted(edges[m]):
            print(f"  {m} -> {t}    ({edges[m][t]})")
cycles = [c for c in sccs if len(c) > 1]
for c in cycles:
    print(f"cycle of {len(c)} modules: {', '.join(c)}")
    for m in c:
        for t in sorted(edges[m]):
            if t in c:
                print(f"  {m} -> {t}    ({edges[m][t]})")
if not cycles:
    print("no import cycle")
sys.exit(1 if cycles else 0)
PY
