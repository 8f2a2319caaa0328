#!/usr/bin/env python3
"""check_layers.py OBJECT... (--doc docs/architecture.md | --order "a b c")

The house rules of the source tree, read from the object files a build made:
- every undefined symbol of an object (`nm`) is resolved to the object that defines it,
  which gives one edge "file A calls file B" per pair;
- no two files depend on each other, directly or through a loop of files;
- no file calls a file of a higher room. A file's room is the first folder under src/
  (src/backend/cpu/cpu.c is in `backend`), tools/ is the program above every room, and a
  generated file (the embedded device source) belongs to the room that embeds it.

The room order is written once, in docs/architecture.md, as the line
    Room order (lowest first): `core` → `backend` → ...
and read from there (--order gives it directly, for the self-test).

The objects are CMake's ($<TARGET_OBJECTS:redco> and the program's): the part of a path
after CMakeFiles/TARGET.dir/ names the source, so .../redco.dir/src/core/graph.c.o is the
object of src/core/graph.c. Prints each offence with the symbols
behind it and exits 1 when there is any; prints a summary line and exits 0 otherwise.
"""
import collections
import re
import subprocess
import sys

DEFINED = set("TDBRCVWGSiu")     # nm's types of symbols an object defines (upper case: global)
USED = {"U", "w"}                # undefined (w: weak undefined)


def read_order(doc):
    with open(doc, encoding="utf-8") as f:
        for line in f:
            if line.startswith("Room order (lowest first):"):
                return re.findall(r"`([a-z_]+)`", line)
    sys.exit(f"check_layers: {doc} has no line 'Room order (lowest first): `room` → ...'")


def objects(paths):
    """(source path, object path) of each object file"""
    out = []
    for path in paths:
        m = re.search(r"CMakeFiles/[^/]+\.dir/(.*)\.o(bj)?$", path)
        if not m:
            sys.exit(f"check_layers: {path} is not an object of a CMake target (CMakeFiles/TARGET.dir/...)")
        out.append((m.group(1), path))
    return sorted(out)


def symbols(path):
    text = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in DEFINED and parts[1].isupper():
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] in USED:
            used.add(parts[1])
    return defined, used


def room_of(src, order):
    parts = src.split("/")
    if parts[0] == "tools":
        return "tools"
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] == "generated" and parts[-1].startswith("gpu_source"):
        return "backend"
    return None


def strongly_connected(nodes, edges):
    """Tarjan's components of more than one file (iterative: no recursion limit)"""
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return comps


def cycle_in(comp, edges):
    """one loop through the component, as a list of files (first == last)"""
    members = set(comp)
    start = comp[0]
    path, seen = [start], {start}
    prev = {start: None}
    queue = collections.deque([start])
    while queue:  # breadth first from start until an edge returns to start
        v = queue.popleft()
        for w in sorted(edges[v]):
            if w == start:
                loop = [v]
                while prev[loop[-1]] is not None:
                    loop.append(prev[loop[-1]])
                return list(reversed(loop)) + [start]
            if w in members and w not in seen:
                seen.add(w)
                prev[w] = v
                queue.append(w)
    return path


def main(argv):
    paths, order = [], None
    args = iter(argv)
    for a in args:
        if a == "--doc":
            order = read_order(next(args))
        elif a == "--order":
            order = next(args).split()
        else:
            paths.append(a)
    if not paths or not order:
        sys.exit(__doc__)
    rank = {r: i for i, r in enumerate(order)}
    rank["tools"] = len(order)
    objs = objects(paths)
    where, uses = {}, {}
    for src, path in objs:
        defined, used = symbols(path)
        uses[src] = used
        for s in defined:
            where.setdefault(s, src)
    calls = collections.defaultdict(lambda: collections.defaultdict(set))
    for src, used in uses.items():
        for s in used:
            d = where.get(s)
            if d and d != src:
                calls[src][d].add(s)
    edges = {src: set(calls[src]) for src in uses}
    offences = 0
    for src in sorted(uses):
        r = room_of(src, order)
        if r is None or r not in rank:
            print(f"check_layers: {src} is in no room of the order ({' → '.join(order)})")
            offences += 1
    for src in sorted(uses):
        ra = room_of(src, order)
        for dst in sorted(calls[src]):
            rb = room_of(dst, order)
            if ra in rank and rb in rank and rank[rb] > rank[ra]:
                syms = ", ".join(sorted(calls[src][dst])[:4])
                print(f"check_layers: {src} ({ra}) calls the higher room {rb}: {dst} ({syms})")
                offences += 1
    for comp in strongly_connected(sorted(uses), edges):
        loop = cycle_in(comp, edges)
        steps = [f"{a} -> {b} ({', '.join(sorted(calls[a][b])[:2])})" for a, b in zip(loop, loop[1:])]
        kind = "depend on each other" if len(comp) == 2 else "call each other in a loop"
        print(f"check_layers: {', '.join(comp)} {kind}: " + "; ".join(steps))
        offences += 1
    nedges = sum(len(v) for v in edges.values())
    print(f"check_layers: {len(uses)} files, {nedges} file-to-file calls, "
          f"rooms {' → '.join(order)} → tools; {offences} offences")
    return 1 if offences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
