#!/usr/bin/env bash
# Import cycles between the modules of every crate of the workspace.
#
# For each crate target (a package's `src/lib.rs` and `src/main.rs`; integration tests,
# benches and build scripts are not looked at) it walks the module tree from the root
# through `mod x;` declarations (one module per file; `foo/mod.rs` is `foo`), collects
# each path that names another module of that target (`use crate::…`, `use super::…`,
# grouped uses expanded, and inline `crate::a::b` paths in code), maps it to the longest
# module prefix that is a file, and prints the strongly connected components of that
# graph that have more than one module, with the edges inside each. Exits 1 when there
# is one, so CI can run it.
#
# Unit tests (items and `mod x;` declarations under `#[cfg(test)]`) are left out: a test
# may reach anywhere. `--with-tests` keeps them. `--edges` prints every edge.
# A `use` makes a name of its module an alias: a path through it counts as an edge to the
# file that defines the item (a `pub use`, glob or not, is only that alias and no edge of
# its own; `--no-reexports`: an edge from the re-exporting module to the child instead,
# the coarser view), and a path to another crate's item is no edge. A private child module
# below the top level (`mod x;` inside `a.rs`) counts as part of its parent (`--files`:
# every file on its own). A path to an item the crate root defines itself is an edge to
# the root (`crate`).
#
# `bash scripts/imports.sh [OPTIONS] [CRATE_DIR…]` checks only the named crates
# (e.g. `supervisor cli`); without one, every crate below.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import os, re, sys

CRATES = ["proto", "core", "gateway", "supervisor", "sdk-rs", "cli", "sdk-node",
          "sdk-python", "e2e", "bench"]
with_tests = "--with-tests" in sys.argv
show_edges = "--edges" in sys.argv
by_file = "--files" in sys.argv
follow_reexports = "--no-reexports" not in sys.argv
chosen = [a.rstrip("/") for a in sys.argv[1:] if not a.startswith("--")]
for c in chosen:
    if c not in CRATES:
        sys.exit(f"unknown crate {c!r}; one of: {', '.join(CRATES)}")

CFG_TEST = r"#\[cfg\((test|all\([^\]]*\btest\b[^\]]*\))\)\]"

def drop_test_items(text):
    """Removes each item under `#[cfg(test)]`: up to its `;`, or its `{…}` block."""
    while True:
        m = re.search(CFG_TEST, text)
        if not m:
            return text
        i = m.end()
        # further attributes, then the item itself
        while True:
            a = re.match(r"\s*#\[[^\]]*\]", text[i:])
            if not a:
                break
            i += a.end()
        j, depth = i, 0
        while j < len(text):
            c = text[j]
            if c == ";" and depth == 0:
                j += 1
                break
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            j += 1
        text = text[: m.start()] + text[j:]

TOKEN = re.compile(
    r'//[^\n]*'                        # line comment
    r'|/\*.*?\*/'                      # block comment
    r'|\bb?r(#*)".*?"\1'               # raw string
    r'|b?"(?:\\.|[^"\\])*"'            # string
    r"|b?'(?:\\.|[^'\\])'",            # char literal, such as '{' (not a lifetime)
    re.S,
)

def clean(text):
    """The code without comments, and every literal emptied, in one left-to-right pass."""
    def blank(m):
        t = m.group(0)
        if t.startswith("/"):
            return " " if t.startswith("/*") else ""
        return "''" if t.endswith("'") else '""'
    return TOKEN.sub(blank, text)

MOD_DECL = re.compile(r"^\s*(pub(?:\([\w:]+\))?\s+)?mod\s+(\w+)\s*;", re.M)

def walk(root):
    """{module: (file, cleaned text)} and the set of modules declared `pub`."""
    files, public = {}, set()
    def visit(mod, path, is_dir_owner):
        raw = clean(open(path).read())
        text = raw if with_tests else drop_test_items(raw)
        files[mod] = (path, text)
        here = os.path.dirname(path)
        if not is_dir_owner:
            here = os.path.join(here, os.path.basename(path)[:-3])
        for m in MOD_DECL.finditer(text):
            name = m.group(2)
            child = name if mod == "crate" else f"{mod}::{name}"
            if m.group(1):
                public.add(child)
            flat, nested = os.path.join(here, name + ".rs"), os.path.join(here, name, "mod.rs")
            if os.path.exists(flat):
                visit(child, flat, False)
            elif os.path.exists(nested):
                visit(child, nested, True)
    visit("crate", root, True)
    return files, public

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

USE = re.compile(r"\b(pub(?:\([\w:]+\))?\s+)?use\s+(\w+\s*::[^;]*);")

INLINE_MOD = re.compile(r"\bmod\s+(\w+)\s*\{")

def inline_spans(text):
    """(start, end, name) of each inline `mod name { … }`"""
    spans = []
    for m in INLINE_MOD.finditer(text):
        depth, j = 0, m.end() - 1
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        spans.append((m.start(), j, m.group(1)))
    return spans

EXTERNAL = "<another crate>"

def analyze(label, root):
    files, public = walk(root)
    modules = set(files)
    texts = {mod: text for mod, (_, text) in files.items()}
    spans = {mod: inline_spans(text) for mod, text in texts.items()}

    def split(mod):
        return mod.split("::") if mod != "crate" else []

    def scope(mod, pos):
        """the module path at `pos` of the file of `mod`, inline modules included"""
        return split(mod) + [name for (a, b, name) in spans[mod] if a <= pos <= b]

    def resolve(mod, pos, path):
        """(module file the path names, the segments after it), EXTERNAL, or None"""
        segs = [s for s in path.split("::") if s]
        if not segs:
            return None
        here = scope(mod, pos)
        if segs[0] == "crate":
            full = segs[1:]
        elif segs[0] in ("super", "self"):
            base = here
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            full = base + segs
        elif "::".join(here + [segs[0]]) in modules:
            # a path relative to the current module: one of its child modules
            full = here + segs
        else:
            return EXTERNAL
        for k in range(len(full), -1, -1):
            cand = "::".join(full[:k]) or "crate"
            if cand in modules:
                return cand, full[k:]
        return None

    # A `use` makes a name of its module an alias: a path to `module::Name` is
    # followed to the file that defines Name (or to nowhere, for another crate's
    # item). A `pub use` is only an alias, not a dependency of the module that
    # holds it; a private `use` is both.
    # `pub use child::*` makes every public name of `child` one of the module's too.
    alias, globs = {}, {}
    for mod, text in texts.items():
        for m in USE.finditer(text):
            for p in expand(m.group(2)):
                name = None
                am = re.match(r"(.*?)\s*\bas\s*(\w+)$", p)
                if am:
                    p, name = am.group(1), am.group(2)
                segs = p.split("::")
                if segs[-1] == "*":
                    r = resolve(mod, m.start(), "::".join(segs[:-1]) + "::_")
                    if m.group(1) and follow_reexports and r and r != EXTERNAL and r[1] == ["_"]:
                        globs.setdefault(mod, []).append(r[0])
                    continue
                name = name or segs[-1]
                if name == "self":
                    name = segs[-2] if len(segs) > 1 else name
                r = resolve(mod, m.start(), p)
                if r == EXTERNAL:
                    alias[(mod, name)] = EXTERNAL
                elif follow_reexports and r and r[1]:
                    alias[(mod, name)] = r[0]

    ITEM = r"\b(?:fn|struct|enum|union|trait|type|const|static|mod|macro_rules!)\s+{}\b"

    def through_glob(to, name):
        """The module a glob re-export of `to` takes `name` from, if one does."""
        if re.search(ITEM.format(re.escape(name)), texts[to]):
            return None  # `to` defines it itself
        for source in globs.get(to, []):
            if (source, name) in alias or re.search(ITEM.format(re.escape(name)), texts[source]):
                return source
        return None

    def target(mod, pos, path):
        r = resolve(mod, pos, path)
        if not r or r == EXTERNAL:
            return None
        to, rest = r
        seen = 0
        while rest and seen < 10:
            seen += 1
            if (to, rest[0]) in alias:
                to, rest = alias[(to, rest[0])], rest[1:]
                if to == EXTERNAL:
                    return None
            elif (source := through_glob(to, rest[0])) is not None:
                to = source
            else:
                break
        if to == "crate" and not rest:
            return None  # `crate` alone, or `use crate::{…}` of modules only
        return to

    edges = {m: {} for m in modules}
    for mod, text in texts.items():
        paths = []
        for m in USE.finditer(text):
            if m.group(1) and follow_reexports:
                continue  # a re-export: see above
            paths += [(m.start(), p) for p in expand(m.group(2))]
        body = re.sub(r"\buse\s+[^;]*;", lambda m: " " * len(m.group(0)), text)
        body = MOD_DECL.sub(lambda m: " " * len(m.group(0)), body)
        for m in re.finditer(r"(?<![\w:])(\w+(?:::\w+)+)", body):
            paths.append((m.start(), m.group(1)))
        for pos, p in paths:
            p = re.sub(r"\s*\bas\s*\w+$", "", p)
            to = target(mod, pos, p)
            if to and to != mod:
                edges[mod].setdefault(to, p)

    # A private child (`mod x;`, not `pub mod x;`) below the top level is part of
    # its parent: the gateway store's `impl Store` blocks spread over store/*.rs
    # are one module.
    def owner(m):
        while not by_file and "::" in m and m not in public:
            m = m.rsplit("::", 1)[0]
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
    cycles = [c for c in sccs if len(c) > 1]
    verdict = f"{len(cycles)} cycle(s)" if cycles else "no import cycle"
    print(f"{label}: {len(modules)} modules, {n_edges} edges, {verdict}")
    if show_edges:
        for m in sorted(edges):
            for t in sorted(edges[m]):
                print(f"  {m} -> {t}    ({edges[m][t]})")
    for c in cycles:
        print(f"  cycle of {len(c)} modules: {', '.join(c)}")
        for m in c:
            for t in sorted(edges[m]):
                if t in c:
                    print(f"    {m} -> {t}    ({edges[m][t]})")
    return len(cycles)

sys.setrecursionlimit(10000)
total = 0
for crate in chosen or CRATES:
    for kind in ("lib", "main"):
        root = os.path.join(crate, "src", kind + ".rs")
        if os.path.exists(root):
            total += analyze(f"{crate} ({'lib' if kind == 'lib' else 'bin'})", root)
print(f"{total} import cycle(s) in all" if total else "no import cycle in any crate")
sys.exit(1 if total else 0)
PY
