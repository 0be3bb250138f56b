#!/usr/bin/env python3
"""Lists the circles between source files of the workspace's crates.

A file depends on another when it names an item the other defines: through a `use`
declaration, a `crate::`/`super::`/`self::` path, or a path through a module it imported
(`store::tasks::lock` after `use crate::store;`). Re-exports (`pub use`) are followed to the
file that defines the item, so a `mod.rs` that only re-exports is not a hub; a parent's
`mod child;` declaration is not a dependency. Test modules (`#[cfg(test)]` to the end of a
file) are left out.

It also lists the circles between a crate's top-level modules (`graphql` naming `http`
while `http` names `graphql`), with one file pair as evidence per edge.

Usage: file_cycles.py [--modules] [CRATE_SRC_DIR ...]   (default: every crate: entity, migration, worker, api)
Prints each circle (a strongly connected set of files, with one cycle through it; a set of
modules, with its edges) and exits 1 when there is a file circle (or, with --modules, a
module circle).
"""
import os
import re
import sys

ITEM = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|const\s+|unsafe\s+)*"
    r"(fn|struct|enum|trait|const|static|type|union|mod|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)
USE = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M | re.S)
PATH = re.compile(r"\b((?:crate|super|self|[a-z_][a-z0-9_]*)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def strip(text):
    """The code without comments, string literals and trailing test modules."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    if cut:
        text = text[: cut.start()]
    return text


def expand(tree, prefix=""):
    """`a::{b, c::{d, self}}` → ["a::b", "a::c::d", "a::c"], with `as` aliases kept."""
    tree = " ".join(tree.split())
    out = []
    depth, start = 0, 0
    brace = tree.find("{")
    if brace == -1:
        path = (prefix + tree).strip()
        alias = None
        if " as " in path:
            path, alias = [part.strip() for part in path.split(" as ")]
        if path.endswith("::self"):
            path = path[: -len("::self")]
        return [(path, alias)]
    head = tree[:brace]
    body = tree[brace + 1 : tree.rfind("}")]
    parts = []
    for index, char in enumerate(body):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(body[start:index])
            start = index + 1
    parts.append(body[start:])
    for part in parts:
        part = part.strip()
        if not part:
            continue
        if part == "self":
            out.append(((prefix + head).rstrip(":").strip(), None))
        else:
            out.extend(expand(part, prefix + head))
    return out


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}  # module path tuple -> file
        self.items = {}  # module path -> {name: kind}
        self.reexports = {}  # module path -> {name: absolute path}
        self.code = {}
        self.uses = {}
        root = "lib.rs" if os.path.exists(os.path.join(src, "lib.rs")) else "main.rs"
        self.load((), os.path.join(src, root))

    def load(self, module, path):
        self.files[module] = path
        text = strip(open(path, encoding="utf-8").read())
        self.code[module] = text
        items = {}
        for kind, name in ITEM.findall(text):
            items.setdefault(name, kind)
        self.items[module] = items
        self.uses[module] = [(bool(vis), expand(tree)) for vis, tree in USE.findall(text)]
        directory = os.path.dirname(path) if os.path.basename(path) in ("lib.rs", "main.rs", "mod.rs") else path[:-3]
        for match in re.finditer(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, re.M):
            name = match.group(1)
            for candidate in (os.path.join(directory, name + ".rs"), os.path.join(directory, name, "mod.rs")):
                if os.path.exists(candidate):
                    self.load(module + (name,), candidate)
                    break

    def absolute(self, module, path):
        """A `use` path as an absolute module path tuple (None for another crate)."""
        parts = path.split("::")
        if parts[0] == "crate":
            return tuple(parts[1:])
        if parts[0] == "self":
            return module + tuple(parts[1:])
        if parts[0] == "super":
            base = list(module)
            while parts and parts[0] == "super":
                base = base[:-1]
                parts = parts[1:]
            return tuple(base) + tuple(parts)
        if (module + (parts[0],)) in self.files:
            return module + tuple(parts)
        return None

    def resolve(self, path, seen=None):
        """The file defining the item (or module) at absolute `path`."""
        seen = seen or set()
        if path in seen:
            return None
        seen.add(path)
        if path in self.files:
            return self.files[path]
        # The longest module prefix, then the item in it.
        for cut in range(len(path) - 1, -1, -1):
            module, rest = path[:cut], path[cut:]
            if module not in self.files:
                continue
            name = rest[0]
            if name in self.items[module]:
                return self.files[module]
            target = self.reexport(module, name)
            if target is not None:
                return self.resolve(target + rest[1:], seen)
            return self.files[module]
        return None

    def reexport(self, module, name):
        for _, paths in self.uses[module]:
            for path, alias in paths:
                if path.endswith("::*"):
                    continue
                last = path.split("::")[-1]
                if (alias or last) == name:
                    return self.absolute(module, path)
        return None

    def dependencies(self, module):
        deps = set()
        aliases = {}
        for _, paths in self.uses[module]:
            for path, alias in paths:
                glob = path.endswith("::*")
                path = path[:-3] if glob else path
                target = self.absolute(module, path)
                if target is None:
                    continue
                file = self.resolve(target)
                if file:
                    deps.add(file)
                if target and target in self.files:
                    aliases[alias or target[-1]] = target
        for match in PATH.findall(self.code[module]):
            parts = match.split("::")
            if parts[0] in ("crate", "super", "self"):
                target = self.absolute(module, match)
            elif parts[0] in aliases:
                target = aliases[parts[0]] + tuple(parts[1:])
            elif (module + (parts[0],)) in self.files:
                target = module + tuple(parts)
            else:
                continue
            file = self.resolve(target) if target else None
            if file:
                deps.add(file)
        deps.discard(self.files[module])
        return deps


def circles(graph):
    """Tarjan's strongly connected components of more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def one_cycle(graph, component):
    """A cycle through the component's first file, for people to read."""
    inside = set(component)
    start = component[0]
    path, seen = [start], {start}

    def walk(node):
        for nxt in sorted(graph.get(node, ())):
            if nxt == start and len(path) > 1:
                return True
            if nxt in inside and nxt not in seen:
                seen.add(nxt)
                path.append(nxt)
                if walk(nxt):
                    return True
                path.pop()
        return False

    walk(start)
    return path + [start]


def file_circles(root):
    """The file circles of the crate at `root`: (component, one readable cycle) pairs."""
    crate = Crate(root)
    graph = {crate.files[module]: crate.dependencies(module) for module in crate.files}
    return [(component, one_cycle(graph, component)) for component in circles(graph)]


def module_circles(root):
    """The circles between the crate's top-level modules: module `a` depends on module `b`
    when a file under `a` names an item defined in a file under `b` (re-exports followed).
    Each circle comes with one edge per pair, as `(a, b, a's file, b's file)` evidence."""
    crate = Crate(root)
    owner = {file: (module[0] if module else None) for module, file in crate.files.items()}
    graph, evidence = {}, {}
    for module, file in crate.files.items():
        top = module[0] if module else None
        for dependency in crate.dependencies(module):
            other = owner[dependency]
            if top is None or other is None or other == top:
                continue
            graph.setdefault(top, set()).add(other)
            evidence.setdefault((top, other), (file, dependency))
    found = []
    for component in circles(graph):
        edges = [
            (a, b) + evidence[(a, b)]
            for a in component
            for b in component
            if b in graph.get(a, ())
        ]
        found.append((component, edges))
    return found


def main():
    args = sys.argv[1:]
    # Module circles fail the run only with --modules (until every crate is clear of them).
    strict_modules = "--modules" in args
    roots = [arg for arg in args if not arg.startswith("--")] or ["entity/src", "migration/src", "worker/src", "api/src"]
    found = 0
    for root in roots:
        for component, cycle in file_circles(root):
            found += 1
            path = " → ".join(os.path.relpath(file, root) for file in cycle)
            print(f"{root}: {len(component)} files in a circle: {path}")
    print(f"{found} circles")
    module_found = 0
    for root in roots:
        for component, edges in module_circles(root):
            module_found += 1
            print(f"{root}: modules in a circle: {', '.join(component)}")
            for a, b, file, dependency in edges:
                print(f"    {a} → {b}  ({os.path.relpath(file, root)} names {os.path.relpath(dependency, root)})")
    print(f"{module_found} module circles")
    return 1 if found or (strict_modules and module_found) else 0


if __name__ == "__main__":
    sys.exit(main())
