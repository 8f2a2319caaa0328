#!/usr/bin/env python3
"""check_docs.py SOURCE_DIR - docs/architecture.md stays true to the tree.

- Every name it cites in `code` exists: a path of the repository (src/run/workdir.c,
  tests/kit/, src/parallel/shard*.c; up to a placeholder such as tests/ROOM/) is a file or
  folder of it, a bare file name (`plan.c`) is one somewhere in the tree; an identifier of the library (rc_..., rci_..., RC_...,
  REDCO_...) appears in the sources as a whole word; `redco CMD` names a command the
  program has.
- It names every command of the program (tools/redco.c's table): `redco CMD` for each.
- It holds no timings that go stale: no figure in seconds, milliseconds or tokens per second.
Prints each offence; exits 1 when there is any.
"""
import glob
import os
import re
import sys

SOURCES = ("src", "include", "tools", "tests", "bench", "examples", "fuzz", "scripts", "CMakeLists.txt", "Makefile")
TOPS = {"src", "include", "tools", "tests", "bench", "examples", "fuzz", "scripts", "docs", "data", ".ci"}
IDENT = re.compile(r"^(rc|rci|RC|REDCO)_[A-Za-z0-9_]*$")
# "1.9 s", "17 ms", "3.69 s", "120 tok/s": a measurement, which goes stale
TIMING = re.compile(r"\b\d+(\.\d+)?\s*(ms|s|µs|us|tok/s|tokens/s)\b(?![a-z])")


def source_text(root):
    chunks = []
    for top in SOURCES:
        path = os.path.join(root, top)
        if os.path.isfile(path):
            chunks.append(open(path, encoding="utf-8", errors="replace").read())
            continue
        for d, _, files in os.walk(path):
            for f in files:
                if f.endswith((".c", ".h", ".cpp", ".cl", ".py", ".sh", ".cmake", ".txt")):
                    chunks.append(open(os.path.join(d, f), encoding="utf-8", errors="replace").read())
    return "\n".join(chunks)


def file_names(root):
    names = set()
    for top in ("src", "tools", "tests", "bench", "include", "examples", "fuzz", "scripts", "docs"):
        for d, _, files in os.walk(os.path.join(root, top)):
            names.update(files)
    return names


def commands(root):
    text = open(os.path.join(root, "tools", "redco.c"), encoding="utf-8").read()
    return sorted(set(re.findall(r'\{\s*"([a-z-]+)"\s*,\s*cmd_', text)))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    doc_path = os.path.join(root, "docs", "architecture.md")
    doc = open(doc_path, encoding="utf-8").read()
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source_text(root)))
    files = file_names(root)
    cmds = commands(root)
    offences, checked = [], 0
    for span in re.findall(r"`([^`\n]+)`", doc):
        for token in re.findall(r"[A-Za-z0-9_./*-]+", span):
            token = token.rstrip(".,;:")
            parts = token.split("/")
            if IDENT.match(parts[0]):  # rc_remat_begin/_end: the first name stands for both
                token = parts[0]
            if "/" in token:
                # a path of the repository; placeholders (tests/ROOM/, NAME) and wildcards
                # (shard*.c) are checked up to them; workdir names (best/, final/) are not paths
                if parts[0] not in TOPS:
                    continue
                fixed = []
                for part in parts:
                    if not part or part.isupper() or re.search(r"[A-Z]{3,}", part):
                        break
                    fixed.append(part)
                    if "*" in part:
                        break
                path = "/".join(fixed)
                checked += 1
                if "*" in path:
                    if not glob.glob(os.path.join(root, path)):
                        offences.append(f"no file matches {path}")
                elif not os.path.exists(os.path.join(root, path)):
                    offences.append(f"the path {path} does not exist")
            elif re.match(r"^[A-Za-z0-9_-]+\.(c|h|cl|py|sh|cmake|md)$", token):
                checked += 1
                if token not in files:
                    offences.append(f"the file {token} is in no folder of the tree")
            elif IDENT.match(token):
                checked += 1
                if token not in words:
                    offences.append(f"{token} appears nowhere in the sources")
        m = re.match(r"^redco ([a-z-]+)", span)
        if m and m.group(1) not in cmds:
            offences.append(f"`{span}`: the program has no command {m.group(1)}")
    for c in cmds:
        if f"`redco {c}" not in doc:
            offences.append(f"the command `redco {c}` is not described")
    for n, line in enumerate(doc.splitlines(), 1):
        for m in TIMING.finditer(line):
            offences.append(f"line {n}: a timing ({m.group(0)}) goes stale: keep figures in the README or a benchmark")
    for o in offences:
        print(f"check_docs: docs/architecture.md: {o}")
    print(f"check_docs: {checked} names checked, {len(cmds)} commands, {len(offences)} offences")
    return 1 if offences else 0


if __name__ == "__main__":
    sys.exit(main())
