#!/usr/bin/python3
"""Layering check of src/: every #include "x/y.h" must stay in its layer or go down.

The layers are the folders of src/, declared bottom first with the layers each
may include by the mx_layer(...) lines of CMakeLists.txt, which also build each
as its own library (docs/architecture.md shows the same table). A layer may
include itself and, transitively, the layers it declares; anything else is an
up-include and is reported as FILE:LINE. The build runs this check before any
layer compiles, so such an include fails the build.

Run: tools/check-layers.py [--root DIR]   (exit 0 clean, 1 on offending includes)
     tools/check-layers.py --self-test     (checks the checker on a small made-up tree)
The ctests Layers.CheckLayers and Layers.SelfTest (CMakeLists.txt) run them too.
"""
import argparse
import fnmatch
import os
import re
import sys
import tempfile

LAYER_RE = re.compile(r"^\s*mx_layer\((\w+)([^)]*)\)", re.M)


def read_layers(cmake_text):
    """[(layer, [its folder pattern], [declared layers])] from the mx_layer(...) lines, bottom first."""
    layers = []
    for m in LAYER_RE.finditer(cmake_text):
        words = m.group(2).split()
        deps = []
        if "DEPENDS" in words:
            for w in words[words.index("DEPENDS") + 1:]:
                if w.isupper():  # the next keyword (LIBS, EXTRA, EXCLUDE)
                    break
                deps.append(w)
        layers.append((m.group(1), [m.group(1) + "/*"], deps))
    if not layers:
        sys.exit("check-layers: no mx_layer(...) line found in CMakeLists.txt")
    return layers


INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXTS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")


def layer_closure(layers):
    """Layer -> the set of layers it may include (itself and its declared layers, transitively)."""
    allowed = {}
    for name, _, deps in layers:
        if name in allowed:
            sys.exit(f"check-layers: layer {name} declared twice")
        mine = {name}
        for d in deps:
            if d not in allowed:
                sys.exit(f"check-layers: layer {name} names {d}, which is not declared below it")
            mine |= allowed[d]
        allowed[name] = mine
    return allowed


def layer_of(layers, rel):
    """The layer of a path relative to src/, or None."""
    for layer, patterns, _ in layers:
        if any(fnmatch.fnmatchcase(rel, p) for p in patterns):
            return layer
    return None


def check(src, layers):
    """Returns (offending include lines, files in no layer), both sorted."""
    allowed = layer_closure(layers)
    offending, unowned = [], []
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for f in sorted(files):
            if not f.endswith(SOURCE_EXTS):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            mine = layer_of(layers, rel)
            if mine is None:
                unowned.append(f"src/{rel}: in no layer (declare its folder with mx_layer in CMakeLists.txt)")
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    m = INCLUDE_RE.match(line)
                    if not m or "/" not in m.group(1):
                        continue  # a system header, or one beside the file (its own layer)
                    inc = m.group(1)
                    theirs = layer_of(layers, inc)
                    if theirs is None or theirs in allowed[mine]:
                        continue  # not under src/ (e.g. nlohmann/json.hpp), or allowed
                    offending.append(f"src/{rel}:{n}: #include \"{inc}\": layer {mine} may not include "
                                     f"layer {theirs}")
    return offending, unowned


def run(root):
    with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as fh:
        layers = read_layers(fh.read())
    offending, unowned = check(os.path.join(root, "src"), layers)
    for line in unowned + offending:
        print(line)
    if offending or unowned:
        print(f"check-layers: {len(offending)} include(s) run up a layer, {len(unowned)} file(s) in no layer; "
              "the layers are the mx_layer lines of CMakeLists.txt (docs/architecture.md)", file=sys.stderr)
        return 1
    print(f"check-layers: {len(layers)} layers; every include stays in its layer or goes down")
    return 0


def self_test():
    """The checker on a made-up tree: allowed includes, two up-includes, a file in no layer."""
    cmake = ("mx_layer(core LIBS fmt::fmt)  # bottom\n"
             "mx_layer(backends DEPENDS core EXTRA gen.cpp)\n"
             "mx_layer(models DEPENDS backends)\n"
             "  mx_layer(sampling DEPENDS core)\n"
             "mx_layer(engine DEPENDS models sampling LIBS x)\n")
    files = {
        "core/a.h": '#include "core/b.h"\n#include <vector>\n',
        "core/b.h": "",
        "models/m.h": '#include "core/a.h"\n#include "backends/backend.h"\n',
        "backends/backend.h": '#include "core/a.h"\n\n#include "models/m.h"\n',
        "sampling/sampling.h": '#include "engine/engine.h"\n',
        "engine/engine.h": '#include "sampling/sampling.h"\n#include "core/a.h"\n',
        "stray/x.h": "",
    }
    layers = read_layers(cmake)
    with tempfile.TemporaryDirectory() as d:
        for rel, text in files.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as fh:
                fh.write(text)
        offending, unowned = check(d, layers)
    want = [
        'src/backends/backend.h:3: #include "models/m.h": layer backends may not include layer models',
        'src/sampling/sampling.h:1: #include "engine/engine.h": layer sampling may not include layer engine',
    ]
    want_unowned = ["src/stray/x.h: in no layer (declare its folder with mx_layer in CMakeLists.txt)"]
    if [n for n, _, _ in layers] != ["core", "backends", "models", "sampling", "engine"] or \
            layers[4][2] != ["models", "sampling"]:
        print(f"check-layers self-test failed: read_layers gave {layers}")
        return 1
    if offending != want or unowned != want_unowned:
        print("check-layers self-test failed:\n got  " + "\n      ".join(offending + unowned) +
              "\n want " + "\n      ".join(want + want_unowned))
        return 1
    print("check-layers self-test: passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="the repository (its CMakeLists.txt and src/ are read)")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a made-up tree")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    return run(args.root)


if __name__ == "__main__":
    sys.exit(main())
