#!/usr/bin/env python3
"""Independent dequantisation oracle for pig's weight types: the `gguf` package's NumPy
dequantisers (gguf-py, maintained with llama.cpp; python/requirements.txt pins it).

Writes into --out, for each type, seeded random blocks and what gguf makes of them:
  <TYPE>.blocks   raw blocks as a GGUF file stores them
  <TYPE>.f32      the dequantised values, float32, little-endian
tests/runtime/dequant_oracle_test.cpp (ctest: runtime.dequant_oracle.reference, then
DequantOracle.*) compares pig's scalar decoder and every Highway target with them.
Any failure (an import error included) is an error: gguf and numpy are in the base .venv.
"""
import argparse
import os
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"]
N_BLOCKS = 64
# Byte offsets of the f16 scales in each block, set to finite values (random bits may be NaN,
# infinite or huge); everything else is random.
F16_SCALES = {"Q4_0": [0], "Q4_1": [0, 2], "Q8_0": [0], "Q4_K": [0, 2], "Q6_K": [208]}


def blocks_of(name, rng):
    qtype = GGMLQuantizationType[name]
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(N_BLOCKS, block_bytes), dtype=np.uint8)
    if name in ("F16", "BF16"):
        # Random bit patterns (subnormals and zeros of both signs included), with the exponent
        # of every infinity or NaN cleared.
        bits = rng.integers(0, 1 << 16, size=N_BLOCKS, dtype=np.uint16)
        bits[:4] = [0x0000, 0x8000, 0x0001, 0x8001]
        exp = np.uint16(0x7C00 if name == "F16" else 0x7F80)
        bits[(bits & exp) == exp] &= ~exp
        raw = bits.view(np.uint8).reshape(N_BLOCKS, 2)
    for off in F16_SCALES.get(name, []):
        scale = rng.uniform(-0.1, 0.1, size=N_BLOCKS).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(N_BLOCKS, 2)
    return qtype, block_elems, np.ascontiguousarray(raw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(20240611)
    for name in TYPES:
        qtype, block_elems, raw = blocks_of(name, rng)
        want = np.asarray(dequantize(raw.reshape(-1), qtype), dtype=np.float32).reshape(-1)
        assert want.size == N_BLOCKS * block_elems, (name, want.size)
        assert np.all(np.isfinite(want)), name
        raw.tofile(os.path.join(args.out, name + ".blocks"))
        want.astype("<f4").tofile(os.path.join(args.out, name + ".f32"))
        print(f"{name}: {N_BLOCKS} blocks, {want.size} values, max |x| {np.abs(want).max():.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
