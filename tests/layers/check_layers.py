#!/usr/bin/env python3
"""The layering check: fails, naming file:line and the rule, when a lower layer includes a
higher one's headers (`#include "pig/<Name>/..."`).

Layers, lowest first, and what each may include besides itself (README's Layout,
CMakeLists.txt's layer comment):

    spec       nothing of pig
    reference  spec
    dialect    spec
    passes     dialect, spec
    codegen    passes, dialect, spec
    runtime    reference, spec          (all of runtime/: model, attention, kernels, common, cuda)
    capi       runtime, reference, spec (pig.h, the C interface over the runtime)
    tune       reference, spec          (records, frontier, points: runtime-free)
    app        everything above
    eval       app and everything above it
    serve      app and everything above it (pig-serve's engine, protocol and HTTP front)
    tools, bench, tests, examples: anything (not checked)

No exceptions by path: a file's layer is its top-level folder. (The generated kernels' interface,
pig/runtime/generated_kernels.h, is the runtime's; pig-tune's subcommands are tools/pig-tune/.)

An include's layer is the top-level folder that holds <folder>/.../include/pig/<Name>/ (found
in the tree, e.g. pig/Dialect -> dialect, pig/cuda -> runtime); a `pig/<Name>` that no layer
provides is an error too, so a new folder cannot slip past the check.

usage: check_layers.py [ROOT]          (default: the repository this file is in)
       check_layers.py --arrows [ROOT] (the layers each layer includes, with include counts)
       check_layers.py --self-test     (the checker against small fake trees)
"""
import os
import re
import shutil
import sys
import tempfile

ALLOWED = {
    "spec": set(),
    "reference": {"spec"},
    "dialect": {"spec"},
    "passes": {"dialect", "spec"},
    "codegen": {"passes", "dialect", "spec"},
    "runtime": {"reference", "spec"},
    "capi": {"runtime", "reference", "spec"},
    "tune": {"reference", "spec"},
}
ALLOWED["app"] = set(ALLOWED)

# The runtime is production code; the reference is the oracle its tests compare against. The
# runtime includes the reference only where bit-exactness needs the oracle's own RNG, rounding or
# fit, so that a kernel and pig::ref agree to the bit (the kernel tests rely on it). This is the
# one place that lists them (runtime/CMakeLists.txt links pig_reference for these alone); any
# other pig/reference header in runtime/ fails the check. Configuration types and their parsers
# (TransformSpec, HybridConfig, the (K, L, t) limits) are spec's, not the reference's.
RUNTIME_USES_OF_REFERENCE = {
    "kv_quant.h": "the q8 KV format: quantize_q8 / dequantize_q8 define its bytes, so the "
                  "runtime's q8 rows are the oracle's (kv_cache, lsh_generic, hybrid_attend, "
                  "budget_attention)",
    "lsh.h": "simhash_matrix (W from the reference's RNG: the runtime hashes bit-identically), "
             "log_collision_probability (MagicPIG's weights 1/u), mean_of_rows and mean_count (the "
             "centring mean over its window, accumulated as the oracle does)",
    "random.h": "Rng: oracle sampling's draws (budget_attention), seeded as pig::ref's",
    "transform.h": "fitted hashing: fit_transform / fit_stride / HashTransform, the map the "
                   "oracle fits, held by lsh_index.h's FittedHash",
    "matrix.h": "Matrix / OwnedMatrix, the row views fit_transform and simhash_matrix take",
    "hybrid.h": "lsh-hybrid's uniforms and skip draws (hybrid_uniform, hybrid_skip_draw), its "
                "int8 rounding of keys and queries (HybridLowRank), its cosine table and error "
                "quantile: the runtime's selection is the oracle's draw for the same seed",
}
# Of those, what the runtime's public headers (runtime/include) may include: the fitted map that
# lsh_index.h's FittedHash holds, and the matrix view it is fitted from.
RUNTIME_PUBLIC_REFERENCE = {"matrix.h", "transform.h"}
ALLOWED["eval"] = ALLOWED["app"] | {"app"}
ALLOWED["serve"] = ALLOWED["app"] | {"app"}

SOURCE_EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]pig/(([^/">]+)/[^">]*)')
SKIP_DIRS = {"build", ".git", ".venv", "node_modules"}


def include_map(root):
    """pig/<Name> -> the layer (top-level folder) whose include/pig/<Name> it is."""
    names = {}
    for layer in ALLOWED:
        top = os.path.join(root, layer)
        for dirpath, dirnames, _ in os.walk(top):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
            if os.path.basename(dirpath) == "pig" and os.path.basename(
                    os.path.dirname(dirpath)) == "include":
                for name in dirnames:
                    names[name] = layer
                dirnames[:] = []
    return names


def violations(root):
    names = include_map(root)
    found = []
    for layer in sorted(ALLOWED):
        top = os.path.join(root, layer)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for filename in sorted(filenames):
                if not filename.endswith(SOURCE_EXTENSIONS):
                    continue
                path = os.path.join(dirpath, filename)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        name = m.group(2)
                        target = names.get(name)
                        if target is None:
                            found.append(f"{rel}:{number}: includes pig/{name}/, which no layer "
                                         f"provides (no <layer>/.../include/pig/{name}/)")
                            continue
                        allowed = ALLOWED[layer]
                        if layer == "runtime" and target == "reference":
                            header = m.group(1)[len("reference/"):]
                            public = "/include/" in "/" + rel.replace(os.sep, "/")
                            if header not in RUNTIME_USES_OF_REFERENCE:
                                found.append(f"{rel}:{number}: runtime includes pig/{m.group(1)}, "
                                             "not one of RUNTIME_USES_OF_REFERENCE (the "
                                             "reference where bit-exactness needs it)")
                            elif public and header not in RUNTIME_PUBLIC_REFERENCE:
                                found.append(f"{rel}:{number}: a runtime header includes "
                                             f"pig/{m.group(1)}; runtime/include may include "
                                             "only pig/reference/" +
                                             ", pig/reference/".join(sorted(RUNTIME_PUBLIC_REFERENCE)))
                            continue
                        if target != layer and target not in allowed:
                            may = ", ".join(sorted(allowed)) or "nothing of pig"
                            found.append(f"{rel}:{number}: {layer} includes pig/{name}/ "
                                         f"({target}): {layer} may include {may}")
    return found


def layer_arrows(root):
    """{layer: {included layer: number of includes}} over the checked layers, self-includes left
    out: the folder-level graph the rules above bound."""
    names = include_map(root)
    arrows = {}
    for layer in sorted(ALLOWED):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, layer)):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
            for filename in filenames:
                if not filename.endswith(SOURCE_EXTENSIONS):
                    continue
                with open(os.path.join(dirpath, filename), encoding="utf-8",
                          errors="replace") as f:
                    for line in f:
                        m = INCLUDE.match(line)
                        target = names.get(m.group(2)) if m else None
                        if target and target != layer:
                            to = arrows.setdefault(layer, {})
                            to[target] = to.get(target, 0) + 1
    return arrows


def print_arrows(root):
    """The layering check's listing: each layer, lowest first, and the layers it includes."""
    arrows = layer_arrows(root)
    for layer in ALLOWED:
        to = arrows.get(layer, {})
        listed = ", ".join(f"{t} ({n})" for t, n in sorted(to.items())) or "nothing of pig"
        print(f"{layer:10} -> {listed}")
    return 0


def check(root):
    found = violations(root)
    for v in found:
        print(v)
    if found:
        print(f"check_layers: {len(found)} include(s) break the layering "
              f"(tests/layers/check_layers.py lists the rules)")
        return 1
    print(f"check_layers: {root}: every pig/ include follows the layering")
    return 0


def self_test():
    """The checker on fake trees: one with a violation must fail naming it, a clean one pass."""
    made = []

    def tree(files):
        root = tempfile.mkdtemp(prefix="check_layers.")
        made.append(root)
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        return root

    base = {
        "spec/include/pig/spec/facts.h": "#pragma once\n",
        "dialect/include/pig/Dialect/Ops.h": '#include "pig/spec/facts.h"\n',
        "runtime/include/pig/runtime/step.h": '#include "pig/spec/facts.h"\n',
        "runtime/cuda/include/pig/cuda/cuda.h": '#include "pig/runtime/step.h"\n',
        "tools/x/main.cpp": '#include "pig/Dialect/Ops.h"\n#include "pig/cuda/cuda.h"\n',
        "runtime/include/pig/runtime/generated_kernels.h": '#include "pig/runtime/step.h"\n',
    }
    failures = []
    clean = tree(base)
    if violations(clean):
        failures.append(f"a clean tree was refused: {violations(clean)}")
    bad = tree(dict(base, **{
        "dialect/lib/Ops.cpp": '// ok\n#include "pig/Dialect/Ops.h"\n  #  include <pig/cuda/cuda.h>\n',
        "spec/src/facts.cpp": 'const char *s = "#include \\"pig/runtime/step.h\\"";\n',
    }))
    got = violations(bad)
    want = ("dialect/lib/Ops.cpp:3: dialect includes pig/cuda/ (runtime): "
            "dialect may include spec")
    if got != [want]:
        failures.append(f"the fake violation: expected [{want!r}], got {got!r}")
    codegen = tree(dict(base, **{"codegen/include/pig/Codegen/Emit.h":
                                 '#include "pig/runtime/step.h"\n'}))
    if [v.split(":")[0] for v in violations(codegen)] != ["codegen/include/pig/Codegen/Emit.h"]:
        failures.append(f"the compiler's header including runtime: {violations(codegen)!r}")
    unknown = tree(dict(base, **{"passes/lib/P.cpp": '#include "pig/Nowhere/x.h"\n'}))
    if len(violations(unknown)) != 1 or "which no layer provides" not in violations(unknown)[0]:
        failures.append(f"an unknown pig/ name passed: {violations(unknown)!r}")
    # No path makes an exception: a compiler header naming generated kernels is the compiler's,
    # and tune is below app and eval wherever in tune/ a file sits.
    got = violations(tree(dict(base, **{
        "app/include/pig/app/deco.h": '#include "pig/runtime/step.h"\n',
        "codegen/include/pig/Codegen/GeneratedKernels.h": '#include "pig/runtime/step.h"\n',
        "tune/src/workflows/speed.cpp": '#include "pig/app/deco.h"\n'})))
    want = ["codegen/include/pig/Codegen/GeneratedKernels.h:1: codegen includes pig/runtime/ "
            "(runtime): codegen may include dialect, passes, spec",
            "tune/src/workflows/speed.cpp:1: tune includes pig/app/ (app): tune may include "
            "reference, spec"]
    if got != want:
        failures.append(f"the former path exceptions: expected {want!r}, got {got!r}")
    # The runtime's uses of the reference: listed headers only, and fewer in its public headers.
    got = violations(tree(dict(base, **{
        "reference/include/pig/reference/kv_quant.h": "#pragma once\n",
        "reference/include/pig/reference/hybrid.h": "#pragma once\n",
        "reference/include/pig/reference/oracle.h": "#pragma once\n",
        "runtime/attention/kv.cpp": '#include "pig/reference/kv_quant.h"\n',
        "runtime/model/x.cpp": '#include "pig/reference/oracle.h"\n',
        "runtime/include/pig/runtime/a.h": '#include "pig/reference/hybrid.h"\n'})))
    want = ["runtime/include/pig/runtime/a.h:1: a runtime header includes pig/reference/hybrid.h; "
            "runtime/include may include only pig/reference/matrix.h, pig/reference/transform.h",
            "runtime/model/x.cpp:1: runtime includes pig/reference/oracle.h, not one of "
            "RUNTIME_USES_OF_REFERENCE (the reference where bit-exactness needs it)"]
    if got != want:
        failures.append(f"the runtime's uses of the reference: expected {want!r}, got {got!r}")
    arrows = layer_arrows(tree(dict(base, **{"dialect/lib/A.cpp": '#include "pig/Dialect/Ops.h"\n'})))
    if arrows != {"dialect": {"spec": 1}, "runtime": {"spec": 1}}:
        failures.append(f"the arrows of the clean tree: {arrows!r}")
    if check(bad) != 1:
        failures.append("check() returned success on a violation")
    for root in made:
        shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print("check_layers self-test: FAIL:", f)
    if not failures:
        print("check_layers self-test: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    args = sys.argv[1:]
    listing = bool(args) and args[0] == "--arrows"
    if listing:
        args = args[1:]
    root = os.path.abspath(args[0] if args else os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.exit(print_arrows(root) if listing else check(root))
