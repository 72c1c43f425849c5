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
    runtime    reference, spec          (runtime/kernels and runtime/cuda are runtime)
    tune       reference, spec, runtime
    app        everything above
    eval       app and everything above it
    serve      app and everything above it (pig-serve's engine, protocol and HTTP front)
    tune workflows  eval and everything above it (see below)
    tools, bench, tests, examples: anything (not checked)

One exception by path: codegen/include/pig/Codegen/Generated*.h declare what the TUs
pig-translate emits define (pig_generated_kernels, built from codegen's output and linked above
the runtime, by tools only: the runtime includes none of them). They are that library's
interface, not the compiler's, and may include runtime and spec ("generated kernels" below).

One layer by path: pig_tune_workflows (tune/src/workflows/ and its header
tune/include/pig/tune/workflows.h) is pig-tune's application layer, the subcommands a thin main
calls: it uses app's decorators, tiled-context decoder and progress bar, and eval's text and
report helpers, so it sits above eval ("tune workflows"). The rest of tune/ may not include its
header, and neither may app or eval.

An include's layer is the top-level folder that holds <folder>/.../include/pig/<Name>/ (found
in the tree, e.g. pig/Dialect -> dialect, pig/cuda -> runtime); a `pig/<Name>` that no layer
provides is an error too, so a new folder cannot slip past the check.

usage: check_layers.py [ROOT]      (default: the repository this file is in)
       check_layers.py --self-test (the checker against small fake trees)
"""
import os
import re
import sys
import tempfile

ALLOWED = {
    "spec": set(),
    "reference": {"spec"},
    "dialect": {"spec"},
    "passes": {"dialect", "spec"},
    "codegen": {"passes", "dialect", "spec"},
    "runtime": {"reference", "spec"},
    "tune": {"reference", "spec", "runtime"},
}
ALLOWED["app"] = set(ALLOWED)
ALLOWED["eval"] = ALLOWED["app"] | {"app"}
ALLOWED["serve"] = ALLOWED["app"] | {"app"}
GENERATED = "generated kernels"
GENERATED_HEADERS = re.compile(r"^codegen/include/pig/Codegen/Generated[^/]*\.h$")
ALLOWED_GENERATED = {"codegen", "runtime", "spec"}
WORKFLOWS = "tune workflows"
WORKFLOWS_FILES = re.compile(r"^tune/(src/workflows/|include/pig/tune/workflows\.h$)")
WORKFLOWS_HEADER = "tune/workflows.h"  # as included: pig/tune/workflows.h
ALLOWED_WORKFLOWS = ALLOWED["eval"] | {"eval"}

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
                        if m.group(1) == WORKFLOWS_HEADER:
                            target = WORKFLOWS
                        if target is None:
                            found.append(f"{rel}:{number}: includes pig/{name}/, which no layer "
                                         f"provides (no <layer>/.../include/pig/{name}/)")
                            continue
                        who, allowed = layer, ALLOWED[layer]
                        if GENERATED_HEADERS.match(rel.replace(os.sep, "/")):
                            who, allowed = GENERATED, ALLOWED_GENERATED
                        if WORKFLOWS_FILES.match(rel.replace(os.sep, "/")):
                            who, allowed = WORKFLOWS, ALLOWED_WORKFLOWS
                        if target != who and target not in allowed:
                            may = ", ".join(sorted(allowed)) or "nothing of pig"
                            what = m.group(1) if target == WORKFLOWS else name + "/"
                            found.append(f"{rel}:{number}: {who} includes pig/{what} "
                                         f"({target}): {who} may include {may}")
    return found


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
    def tree(files):
        root = tempfile.mkdtemp(prefix="check_layers.")
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
        "codegen/include/pig/Codegen/GeneratedKernels.h": '#include "pig/runtime/step.h"\n',
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
    # pig_tune_workflows sits above eval; the rest of tune (and app, eval) may not include it.
    workflows = dict(base, **{
        "app/include/pig/app/deco.h": '#include "pig/runtime/step.h"\n',
        "eval/include/pig/eval/report.h": '#include "pig/app/deco.h"\n',
        "tune/include/pig/tune/workflows.h": '#include "pig/tune/record.h"\n',
        "tune/include/pig/tune/record.h": '#include "pig/spec/facts.h"\n',
        "tune/src/workflows/speed.cpp": ('#include "pig/tune/workflows.h"\n'
                                         '#include "pig/app/deco.h"\n#include "pig/eval/report.h"\n'),
    })
    if violations(tree(workflows)):
        failures.append(f"the workflows' includes were refused: {violations(tree(workflows))!r}")
    got = violations(tree(dict(workflows, **{
        "tune/src/record.cpp": '#include "pig/tune/workflows.h"\n',
        "eval/src/run.cpp": '#include "pig/tune/workflows.h"\n',
        "tune/src/speed.cpp": '#include "pig/app/deco.h"\n'})))
    want = ["eval/src/run.cpp:1: eval includes pig/tune/workflows.h (tune workflows): eval may "
            "include app, codegen, dialect, passes, reference, runtime, spec, tune",
            "tune/src/record.cpp:1: tune includes pig/tune/workflows.h (tune workflows): tune may "
            "include reference, runtime, spec",
            "tune/src/speed.cpp:1: tune includes pig/app/ (app): tune may include reference, "
            "runtime, spec"]
    if got != want:
        failures.append(f"including the workflows from below: expected {want!r}, got {got!r}")
    if check(bad) != 1:
        failures.append("check() returned success on a violation")
    for f in failures:
        print("check_layers self-test: FAIL:", f)
    if not failures:
        print("check_layers self-test: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(check(os.path.abspath(root)))
