#!/usr/bin/env python3
"""check_file_cycles.py: finds source files of src/ that take names from each
other (a calls a function or uses a global that b defines, and b one that a
defines), from the symbols of the build's object files.

For every object file built from src/**/*.c (as the build's
compile_commands.json names them), `nm` lists the symbols it defines
(external linkage only: static functions are private to their file) and the
ones it leaves undefined. A file "takes a name" from the file whose object
defines a symbol it leaves undefined. The script prints each mutual pair,
and each longer circle (a -> b -> c -> a) as well, one per line; it exits 1
when there is any, 0 when the files stand in one order.

Usage: tools/check_file_cycles.py [BUILD_DIR] [--edges] [--all]
  BUILD_DIR  a configured and built CMake tree (default: build)
  --edges    also print every file -> file dependency found
  --all      every source of src/, not only the C files (.cu too)
"""
import json
import os
import shlex
import subprocess
import sys


def source_dir(build_dir):
    """The source tree the build was configured from (CMakeCache.txt), else
    the one this script is in."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def object_files(build_dir, all_sources):
    """(source path relative to the repo, object path) for each object built
    from src/, from the build's compile_commands.json (so objects left behind
    by deleted sources do not count)."""
    repo = source_dir(build_dir)
    path = os.path.join(build_dir, "compile_commands.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        commands = json.load(f)
    found = {}
    for entry in commands:
        src = os.path.relpath(os.path.abspath(entry["file"]), repo).replace(os.sep, "/")
        if not src.startswith("src/") or not (all_sources or src.endswith(".c")):
            continue
        words = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
        if "-o" not in words:
            continue
        obj = os.path.join(entry["directory"], words[words.index("-o") + 1])
        if os.path.exists(obj):
            found.setdefault(src, obj)  # one object per source is enough
    return found


def symbols(obj):
    """(defined, undefined) external symbol names of one object file."""
    out = subprocess.run(["nm", "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        if kind == "U" or (kind in "wv" and len(fields) < 3):
            undefined.add(name)
        elif kind.isupper() or kind in "uvw":
            defined.add(name)
    return defined, undefined


def strongly_connected(nodes, edges):
    """Tarjan's algorithm: the components of the dependency graph."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return comps


def long_circle(comp, edges):
    """A circle of three or more files inside a component, or None when the
    component only hangs together through mutual pairs. Depth-first over
    simple paths; the components are small."""
    members = set(comp)

    def extend(path, seen):
        for w in sorted(edges.get(path[-1], ())):
            if w not in members:
                continue
            if w == path[0] and len(path) >= 3:
                return path + [w]
            if w not in seen and w > path[0]:
                found = extend(path + [w], seen | {w})
                if found:
                    return found
        return None

    for start in comp:
        found = extend([start], {start})
        if found:
            return found
    return None


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    show_edges = "--edges" in argv
    build_dir = args[0] if args else "build"
    objs = object_files(build_dir, "--all" in argv)
    if not objs:
        print(f"check_file_cycles: no object files of src/ under {build_dir}; build first", file=sys.stderr)
        return 2
    owner, needs = {}, {}
    for src, obj in sorted(objs.items()):
        defined, undefined = symbols(obj)
        for name in defined:
            owner.setdefault(name, src)
        needs[src] = undefined
    edges = {}
    for src, undefined in needs.items():
        for name in undefined:
            dst = owner.get(name)
            if dst and dst != src:
                edges.setdefault(src, {}).setdefault(dst, set()).add(name)
    if show_edges:
        for src in sorted(edges):
            for dst in sorted(edges[src]):
                print(f"{src} -> {dst}: {', '.join(sorted(edges[src][dst]))}")
    bad = 0
    for a in sorted(edges):
        for b in sorted(edges[a]):
            if a < b and a in edges.get(b, {}):
                bad += 1
                print(f"mutual: {a} ({', '.join(sorted(edges[a][b]))}) <-> "
                      f"{b} ({', '.join(sorted(edges[b][a]))})")
    # Mutual pairs are printed above; a circle through three or more files
    # is printed too (one per group of files that reach each other).
    for comp in strongly_connected(objs.keys(), edges):
        circle = long_circle(comp, edges) if len(comp) > 2 else None
        if circle:
            bad += 1
            print("circle: " + " -> ".join(circle))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
