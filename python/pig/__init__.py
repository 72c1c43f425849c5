"""pig: LSH sampling attention (MagicPIG) from Python.

The compiled module (python/src/module.cpp, nanobind) takes NumPy arrays and PyTorch CPU tensors
without copying them (DLPack or the buffer protocol) and releases the GIL in every kernel call:

- ``pig.ref``: the scalar reference, the oracle of every test (dense, topk, oracle, magicpig);
- ``pig.LshIndex``: one kv-head's LSH index (build, extend, retrieve, attend) on pig's kernels;
- ``pig.dense_attention``: the dense kernel for a GQA group; ``pig.to_bf16``, ``pig.quantize_q8``,
  ``pig.rows_to_f32``: the KV row formats;
- ``pig.describe_kernels``, ``pig.registered_kernels``, ``pig.simd_target``: what serves here;
- ``pig.PagedAttention``: decode over an engine's paged KV cache (vLLM's CPU layout), per-request
  LSH indexes kept between steps (python/pig_vllm uses it);
- ``pig.Model``, ``pig.AttentionSpec``, ``Model.session``: decoding a GGUF model.
"""
from ._pig import (AttentionSpec, LshIndex, Model, PagedAttention, Session, dense_attention,
                   describe_kernels, quantize_q8, ref, registered_kernels, rows_to_f32,
                   simd_target, to_bf16)

__all__ = ["AttentionSpec", "LshIndex", "Model", "PagedAttention", "Session", "dense_attention",
           "describe_kernels", "quantize_q8", "ref", "registered_kernels", "rows_to_f32",
           "simd_target", "to_bf16"]
