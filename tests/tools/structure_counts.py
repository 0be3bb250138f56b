#!/usr/bin/env python3
"""Prints the structural counts issue 38 asks to watch, so "before" and "after" are measured
by the same code:

- lines of the api that name `worker::store` / `worker::lifecycle` (imports and paths),
- files outside `worker/src/{app,lifecycle,store}` that open a transaction,
- lines of `api/src/mcp` that name `crate::graphql`,
- `match` sites on the database dialect (and the files holding them),
- `json!` in stage code (`worker/src/pipeline/stages.rs`, `worker/src/lifecycle/wait.rs`),
- the worker crate's `pub` and `pub(crate)` items,
- module cycles and file circles (from `file_cycles.py`),
- README lines.

Usage: structure_counts.py (from the workspace root). Counts only; it never fails.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import file_cycles  # noqa: E402


def rust_files(root):
    for directory, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".rs"):
                yield os.path.join(directory, name)


def lines_matching(root, pattern):
    regex = re.compile(pattern)
    count = 0
    for path in rust_files(root):
        code = file_cycles.strip(open(path, encoding="utf-8").read())
        count += sum(1 for line in code.splitlines() if regex.search(line))
    return count


def files_matching(roots, pattern, skip=()):
    regex = re.compile(pattern)
    found = []
    for root in roots:
        for path in rust_files(root):
            if any(path.startswith(prefix) for prefix in skip):
                continue
            if regex.search(file_cycles.strip(open(path, encoding="utf-8").read())):
                found.append(path)
    return found


def dialect_matches():
    regex = re.compile(r"match\s+[^{;]*\b(dialect|backend)\b[^{;]*\{")
    sites, files = 0, set()
    for root in ("worker/src", "api/src"):
        for path in rust_files(root):
            hits = len(regex.findall(file_cycles.strip(open(path, encoding="utf-8").read())))
            if hits:
                sites += hits
                files.add(path)
    return sites, len(files)


def visibility(root):
    public = restricted = 0
    item = r"(fn|struct|enum|trait|const|static|type|mod|use)\b"
    for path in rust_files(root):
        code = file_cycles.strip(open(path, encoding="utf-8").read())
        public += len(re.findall(r"^\s*pub\s+(?:async\s+|unsafe\s+)*" + item, code, re.M))
        restricted += len(re.findall(r"^\s*pub\((?:crate|super|in [^)]*)\)\s+(?:async\s+|unsafe\s+)*" + item, code, re.M))
    return public, restricted


def main():
    os.chdir(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True).stdout.strip() or ".")
    rows = []
    rows.append(("api lines naming worker::store", lines_matching("api/src", r"worker::store\b")))
    rows.append(("api lines naming worker::lifecycle", lines_matching("api/src", r"worker::lifecycle\b")))
    opening = files_matching(
        ["api/src", "worker/src"],
        r"\bbegin_write\b|\.begin\(\)|begin_with_config|\.transaction\(",
        skip=("worker/src/app", "worker/src/lifecycle", "worker/src/store"),
    )
    rows.append(("files opening a transaction outside app/lifecycle/store", len(opening)))
    rows.append(("api/src/mcp lines naming crate::graphql", lines_matching("api/src/mcp", r"crate::graphql\b")))
    sites, files = dialect_matches()
    rows.append(("match on the dialect: sites", sites))
    rows.append(("match on the dialect: files", files))
    json_in_stages = sum(
        lines_matching(path, r"json!") if os.path.isdir(path) else
        sum(1 for line in file_cycles.strip(open(path, encoding="utf-8").read()).splitlines() if "json!" in line)
        for path in ("worker/src/pipeline/stages.rs", "worker/src/lifecycle/wait.rs")
        if os.path.exists(path)
    )
    rows.append(("json! in stage code (stages.rs, wait.rs)", json_in_stages))
    public, restricted = visibility("worker/src")
    rows.append(("worker pub items", public))
    rows.append(("worker pub(crate)/pub(super) items", restricted))
    crates = ["entity/src", "migration/src", "worker/src", "api/src"]
    rows.append(("module cycles", sum(len(file_cycles.module_circles(root)) for root in crates)))
    rows.append(("file circles", sum(len(file_cycles.file_circles(root)) for root in crates)))
    rows.append(("README.md lines", sum(1 for _ in open("README.md", encoding="utf-8"))))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for path in opening:
        print(f"  opens a transaction: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
