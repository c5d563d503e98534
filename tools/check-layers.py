#!/usr/bin/python3
"""Layering check of src/: every #include "x/y.h" must stay in its layer or go down.

The layers and what each may include are declared in LAYERS below, bottom
first (docs/architecture.md shows the same table). A file's layer is its
folder under src/, except for the files listed with a layer in MISPLACED: they
sit in the folder of another layer until the tree is reorganised (issue 22),
and each says why. A layer may include itself and, transitively, the layers
it declares; anything else is an up-include and is reported as FILE:LINE.

Run: tools/check-layers.py [--root DIR]   (exit 0 clean, 1 on offending includes)
     tools/check-layers.py --self-test     (checks the checker on a small made-up tree)
The ctests Layers.CheckLayers and Layers.SelfTest (CMakeLists.txt) run them.
"""
import argparse
import fnmatch
import os
import re
import sys
import tempfile

# (layer, the path patterns under src/ it owns, the layers it may include).
# Bottom first: a layer names only layers declared before it, so the table has
# no cycle by construction (checked in layer_closure).
LAYERS = [
    ("core", ["core/*"], []),  # tensors, dtypes, errors, thread pool, mapped files
    ("quant", ["quant/*"], ["core"]),  # number formats (MXFP4, FP8) and quantization_config
    ("io", ["io/*"], ["quant"]),  # checkpoint formats, HF config, tokenizers, chat templates
    ("kernels", ["kernels/*"], ["quant"]),  # the Backend interface, CPU and GPU kernels, tuned tables
    ("grammar", ["grammar/*"], ["core"]),  # JSON schema -> grammar -> token masks
    ("comm", ["parallel/comm*", "parallel/shard.*", "parallel/device_group.*"], ["kernels"]),  # communicators (host and device) and shard plans the model uses
    ("models", ["models/*"], ["io", "kernels", "comm"]),  # model families, weights, KV pool, forward
    ("sampling", ["engine/sampling.*", "engine/token_constraint.h"], ["core"]),  # sampler, constraint interface
    ("spec", ["spec/*"], ["models", "sampling"]),  # drafters and draft verification
    ("engine", ["engine/*"], ["spec"]),  # scheduling, prefix cache, generate
    ("parallel", ["parallel/*"], ["engine"]),  # a model over ranks, the data-parallel router
    ("plan", ["plan/*"], ["io"]),  # the roofline planner
    ("tools", [], ["engine"]),  # offline tools over models and the engine (see MISPLACED)
    ("server", ["server/*"], ["engine", "grammar", "parallel"]),  # the OpenAI-compatible HTTP server
    ("bench", ["bench/*"], ["engine"]),  # the load generator behind mxserve bench
    ("cli", ["cli/*"], ["server", "bench", "plan", "tools", "parallel"]),  # the mxserve commands
]

# Files whose folder is not their layer yet: path pattern -> (layer, why).
# Reorganising the folders (issue 22) moves them and empties this table.
MISPLACED = {
    "quant/quantizer.*": ("tools", "mxserve quantize: reads a checkpoint (io/safetensors) and builds the model "
                                   "to find its Linear layers (models/model.h); not a number format"),
    "quant/quality.*": ("tools", "mxserve quality: runs the quantized and the original model through "
                                 "engine/generate.h to compare them"),
    "spec/mtp_data.*": ("tools", "mxserve mtp-data: generates MTP training data with the engine "
                                 "(engine/engine.h); not used by the drafters"),
}
# The engine's sampling files (LAYERS "sampling") are below spec, which verifies
# drafts with the sampler; the "comm" files of parallel/ are below models, whose
# forward calls the communicator; both are declared in LAYERS by file pattern.

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXTS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")


def layer_closure():
    """Layer -> the set of layers it may include (itself and its declared layers, transitively)."""
    allowed = {}
    for name, _, deps in LAYERS:
        if name in allowed:
            sys.exit(f"check-layers: layer {name} declared twice")
        mine = {name}
        for d in deps:
            if d not in allowed:
                sys.exit(f"check-layers: layer {name} names {d}, which is not declared below it")
            mine |= allowed[d]
        allowed[name] = mine
    for pattern, (layer, _) in MISPLACED.items():
        if layer not in allowed:
            sys.exit(f"check-layers: MISPLACED {pattern} names an unknown layer {layer}")
    return allowed


def layer_of(rel):
    """The layer of a path relative to src/ (most specific pattern wins), or None."""
    best, best_len = None, -1
    for pattern, (layer, _) in MISPLACED.items():
        if fnmatch.fnmatchcase(rel, pattern) and len(pattern) > best_len:
            best, best_len = layer, len(pattern)
    for layer, patterns, _ in LAYERS:
        for pattern in patterns:
            if fnmatch.fnmatchcase(rel, pattern) and len(pattern) > best_len:
                best, best_len = layer, len(pattern)
    return best


def check(src):
    """Returns (offending include lines, files in no layer), both sorted."""
    allowed = layer_closure()
    offending, unowned = [], []
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for f in sorted(files):
            if not f.endswith(SOURCE_EXTS):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            mine = layer_of(rel)
            if mine is None:
                unowned.append(f"src/{rel}: in no layer (add its folder to LAYERS in tools/check-layers.py)")
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    m = INCLUDE_RE.match(line)
                    if not m or "/" not in m.group(1):
                        continue  # a system header, or one beside the file (its own layer)
                    inc = m.group(1)
                    theirs = layer_of(inc)
                    if theirs is None or theirs in allowed[mine]:
                        continue  # not under src/ (e.g. nlohmann/json.hpp), or allowed
                    offending.append(f"src/{rel}:{n}: #include \"{inc}\": layer {mine} may not include "
                                     f"layer {theirs}")
    return offending, unowned


def run(src):
    offending, unowned = check(src)
    for line in unowned + offending:
        print(line)
    if offending or unowned:
        print(f"check-layers: {len(offending)} include(s) run up a layer, {len(unowned)} file(s) in no layer; "
              "the layers are in tools/check-layers.py and docs/architecture.md", file=sys.stderr)
        return 1
    print("check-layers: every include stays in its layer or goes down")
    return 0


def self_test():
    """The checker on a made-up tree: one allowed include, one up-include, one misplaced file."""
    files = {
        "core/a.h": '#include "core/b.h"\n#include <vector>\n',
        "core/b.h": "",
        "models/m.h": '#include "core/a.h"\n#include "kernels/backend.h"\n',
        "kernels/backend.h": '#include "core/a.h"\n\n#include "models/m.h"\n',
        "engine/sampling.h": '#include "engine/engine.h"\n',
        "engine/engine.h": '#include "engine/sampling.h"\n',
        "quant/quality.cpp": '#include "engine/engine.h"\n',
    }
    with tempfile.TemporaryDirectory() as d:
        for rel, text in files.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as fh:
                fh.write(text)
        offending, unowned = check(d)
    want = [
        'src/engine/sampling.h:1: #include "engine/engine.h": layer sampling may not include layer engine',
        'src/kernels/backend.h:3: #include "models/m.h": layer kernels may not include layer models',
    ]
    if offending != want or unowned:
        print("check-layers self-test failed:\n got  " + "\n      ".join(offending + unowned) +
              "\n want " + "\n      ".join(want))
        return 1
    print("check-layers self-test: passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="the repository (its src/ is checked)")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a made-up tree")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    return run(os.path.join(args.root, "src"))


if __name__ == "__main__":
    sys.exit(main())
