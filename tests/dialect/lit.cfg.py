# lit configuration shared by tests/dialect and tests/passes (tests/passes/lit.cfg.py loads it).
import os

import lit.formats

config.name = "pig-" + os.path.basename(config.test_source_root)
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py"]
config.test_exec_root = config.pig_test_exec_root

# pig-opt from build/bin; FileCheck and not from LLVM 19.
config.environment["PATH"] = os.pathsep.join(
    [config.pig_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")]
)
config.substitutions.append(("%pig_examples", config.pig_examples_dir))
