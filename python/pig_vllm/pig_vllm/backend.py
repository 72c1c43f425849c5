"""PigAttentionBackend: vLLM's CPU attention backend with pig's decode attention.

The cache layout. vLLM's CPU KV cache is one tensor per layer, [num_blocks, kv_heads,
block_size, 2 * head_dim], which the backend views as [num_blocks, kv_heads, 2 * block_size,
head_dim]: a block's K rows, then its V rows. vLLM's own cache writer (ops.
cpu_attn_reshape_and_cache, isa "vec"/"vec16") stores K *transposed* inside a block
([head_dim][block_size]) and V row-major; on AMX machines the interior differs again. pig's
kernels read single key rows through the block table (MagicPIG samples ~3 % of the keys, in no
order); in a transposed block one sampled key costs a read of the whole block. So this backend
owns the block interior: do_kv_cache_update writes K **row-major** like V (row slot % bs of block
slot // bs; V at row bs + slot % bs). Nothing else in vLLM reads the interior of a block.

The rows of a batch:
- decode rows (one query token) of sequences of at least min_tokens tokens, with a pig method
  (dense, magicpig, topk, oracle, quest, lsh-hybrid): pig.PagedAttention.decode, which reads the
  cache in place through the block table and keeps each request's state (LSH indexes, page
  bounds, sketches) between steps (pig_vllm.state);
- every other row (prefill, chunked prefill, short sequences, method "stock"): vLLM's own kernel
  (ops.cpu_attention_with_kv_cache) over a *staging* cache in vLLM's layout, written by vLLM's
  own cache writer from just the blocks those rows touch, with the block table remapped to the
  staging blocks and the scheduler metadata rebuilt for those rows (when they are the whole
  batch, the metadata builder's is used as it is). The kernel so sees exactly the bytes the stock
  backend would have written, and prefill is stock's bit for bit (tests/test_layout.py).
"""
from __future__ import annotations

import os
import re

import torch

from vllm import _custom_ops as ops
from vllm import envs
from vllm.config import get_current_vllm_config
from vllm.logger import init_logger
from vllm.v1.attention.backend import AttentionType
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend, CPUAttentionBackendImpl

from . import amx
from . import config as pig_config
from . import state

# under "vllm." so that vLLM's logging configuration (level, format, process prefix) applies
logger = init_logger("vllm." + __name__)

# PIG_VLLM_CHECK=1: check every pig row's request against the runner's own block lists (tests)
_CHECK = os.environ.get("PIG_VLLM_CHECK", "") not in ("", "0")
_LOGGED = False  # the configuration is logged once per process
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")

# This module runs vLLM's CPU kernels (stage_blocks, _stock) in whatever process imports it, not
# only in vLLM's worker, which asks for AMX's tile permission itself: without it, the first tile
# instruction of vLLM's AMX attention kills the process with SIGILL (pig_vllm/amx.py).
amx.request()


def layer_index(layer_name: str) -> int:
    """"model.layers.12.self_attn.attn" -> 12."""
    m = _LAYER_RE.search(layer_name)
    if m is None:
        raise ValueError(f"pig_vllm: cannot find the layer number in {layer_name!r}")
    return int(m.group(1))


def write_rows(kv_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               slot_mapping: torch.Tensor) -> None:
    """pig_vllm's cache writer: K and V rows of token i at slot slot_mapping[i], both row-major.

    kv_cache [nb, H, bs, 2*d]; key/value [T', H, d] (T' >= T, the first T written);
    slot_mapping [T] (negative: padding, skipped).
    """
    nb, nh, bs, d2 = kv_cache.shape
    kv = kv_cache.view(nb, nh, 2 * bs, d2 // 2)
    t = slot_mapping.shape[0]
    slots = slot_mapping.to(torch.long)
    key, value = key[:t], value[:t]
    if t and bool((slots < 0).any()):
        keep = slots >= 0
        slots, key, value = slots[keep], key[keep], value[keep]
    blk = torch.div(slots, bs, rounding_mode="floor")
    off = slots - blk * bs
    kv[blk, :, off] = key.to(kv.dtype)
    kv[blk, :, off + bs] = value.to(kv.dtype)


def stage_blocks(kv_cache: torch.Tensor, blocks: torch.Tensor, isa: str, k_scale: float = 1.0,
                 v_scale: float = 1.0, kv_cache_dtype: str = "auto"):
    """A cache in vLLM's own layout holding `blocks` of pig_vllm's cache, in that order.

    Returns (key_cache, value_cache), the halves of a [n, H, bs, 2*d] tensor written by vLLM's
    cache writer for `isa`, as the stock backend's forward views them.
    """
    nb, nh, bs, d2 = kv_cache.shape
    d = d2 // 2
    n = blocks.numel()
    src = kv_cache.view(nb, nh, 2 * bs, d)[blocks]                  # [n, H, 2bs, d]
    keys = src[:, :, :bs].permute(0, 2, 1, 3).reshape(n * bs, nh, d)
    values = src[:, :, bs:].permute(0, 2, 1, 3).reshape(n * bs, nh, d)
    staging = torch.empty((n, nh, bs, d2), dtype=kv_cache.dtype)
    key_cache, value_cache = staging.view(n, nh, 2 * bs, d).chunk(2, dim=2)
    slots = torch.arange(n * bs, dtype=torch.long)
    ops.cpu_attn_reshape_and_cache(keys, values, key_cache, value_cache, slots, isa,
                                   k_scale=k_scale, v_scale=v_scale, kv_cache_dtype=kv_cache_dtype)
    return key_cache, value_cache


class PigAttentionImpl(CPUAttentionBackendImpl):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        vllm_config = get_current_vllm_config()
        self.cfg = pig_config.load(getattr(vllm_config, "additional_config", None))
        if self.is_fp8_kv_cache:
            raise NotImplementedError("pig_vllm: fp8 KV caches are not supported")
        model_config = vllm_config.model_config
        self.num_layers = int(model_config.hf_text_config.num_hidden_layers)
        self.max_tokens = int(model_config.max_model_len)
        # The spec is built (and checked) here, but only its text is kept: pig objects that live
        # until the interpreter exits make nanobind report leaks; state owns the live ones.
        self.spec = None
        self.min_tokens = 0
        # pig reads the cache's rows as they are: bf16, or f32 for a float32 model.
        self.kv = {torch.bfloat16: "bf16", torch.float32: "f32"}.get(model_config.dtype)
        if self.cfg.method != "stock":
            spec = self.cfg.attention_spec(self.kv or "bf16")  # raises on a bad configuration
            self.spec = repr(spec)
            self.min_tokens = self.cfg.effective_min_tokens(spec)
            del spec
        # pig's decode serves plain causal self-attention over a bf16 or f32 cache (fp16 it does
        # not read).
        self.pig_capable = (
            self.spec is not None and self.attn_type == AttentionType.DECODER
            and self.kv is not None
            and self.alibi_slopes is None and self.sliding_window == -1
            and not self.logits_soft_cap and self.sinks is None)
        self._layer = None

    # -- the cache writer ------------------------------------------------------------------
    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        if self.attn_type in (AttentionType.ENCODER_ONLY, AttentionType.ENCODER):
            return
        write_rows(kv_cache, key, value, slot_mapping)

    # -- attention -------------------------------------------------------------------------
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported by pig_vllm")
        if attn_metadata is None:  # warm-up
            return output
        if self.attn_type in (AttentionType.ENCODER_ONLY, AttentionType.ENCODER):
            # No cache: the stock path with its own scratch cache in its own layout.
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output)
        global _LOGGED
        if not _LOGGED:
            _LOGGED = True
            logger.info("pig_vllm: method=%s min_tokens=%s threads=%s (%s)", self.cfg.method,
                        self.min_tokens, self.cfg.threads or "bound CPUs",
                        "pig.PagedAttention for long decode rows" if self.pig_capable
                        else "vLLM's kernel for every row")

        plan = self._plan(attn_metadata)
        if plan.stock_rows is not None:
            self._stock(layer, query, output, kv_cache, attn_metadata, plan.stock_rows,
                        all_rows=plan.all_stock)
        if plan.pig_rows is not None:
            self._pig(layer, query, output, kv_cache, plan)
        return output

    # Every layer of a step gets the same metadata object (vLLM builds one per KV-cache group),
    # so the split of its rows, their block table, lengths and request ids are worked out once
    # per step, not once per layer (30 times a step on the default model).
    _plan_md = None
    _plan_cached = None

    def _plan(self, md) -> "_Plan":
        cls = PigAttentionImpl
        if cls._plan_md is md and cls._plan_cached.capable == self.pig_capable:
            return cls._plan_cached
        qsl = md.query_start_loc
        seq_lens = md.seq_lens
        rows = seq_lens.shape[0]
        qlens = qsl[1:rows + 1] - qsl[:rows]
        if self.pig_capable and md.causal and md.dynamic_causal is None:
            to_pig = (qlens == 1) & (seq_lens >= max(self.min_tokens, 1))
        else:
            to_pig = torch.zeros(rows, dtype=torch.bool)
        pig_rows = torch.nonzero(to_pig).flatten()
        stock_rows = torch.nonzero(~to_pig & (qlens > 0)).flatten()
        plan = _Plan(self.pig_capable)
        if stock_rows.numel():
            plan.stock_rows = stock_rows
            plan.all_stock = stock_rows.numel() == rows
        if pig_rows.numel():
            plan.pig_rows = pig_rows
            tokens = qsl[pig_rows].to(torch.long)
            n = tokens.numel()
            # decode rows first and nothing between them (a pure decode step): plain slices
            plan.first = n if bool((tokens == torch.arange(n)).all()) else 0
            plan.tokens = tokens
            plan.table = md.block_table[pig_rows].to(torch.int32).contiguous()
            plan.lens = md.seq_lens[pig_rows].to(torch.int32).contiguous()
            plan.req_ids = state.request_ids(pig_rows.tolist())
            if _CHECK:
                state.check_rows(plan.req_ids, plan.table)
        cls._plan_md, cls._plan_cached = md, plan
        return plan

    def _stock(self, layer, query, output, kv_cache, md, rows, all_rows):
        bs = kv_cache.shape[2]
        qsl, seq_lens = md.query_start_loc, md.seq_lens
        sub_seq = seq_lens[rows]
        nblocks = torch.div(sub_seq + (bs - 1), bs, rounding_mode="floor")
        width = int(nblocks.max())
        table = md.block_table[rows, :width]
        used = torch.arange(width).unsqueeze(0) < nblocks.unsqueeze(1)
        blocks, inverse = torch.unique(table[used], return_inverse=True)
        staged_table = torch.zeros((rows.numel(), width), dtype=md.block_table.dtype)
        staged_table[used] = inverse.to(staged_table.dtype)
        key_cache, value_cache = stage_blocks(
            kv_cache, blocks, layer.isa, layer._k_scale_float, layer._v_scale_float,
            self.kv_cache_dtype)
        if all_rows:
            n = md.num_actual_tokens
            sub_qsl, sched = qsl, md.scheduler_metadata
            q, out, tokens = query[:n], output[:n], None
        else:
            starts, ends = qsl[rows], qsl[rows + 1]
            lens = ends - starts
            sub_qsl = torch.zeros(rows.numel() + 1, dtype=qsl.dtype)
            torch.cumsum(lens, 0, out=sub_qsl[1:])
            tokens = torch.cat([torch.arange(int(s), int(e)) for s, e in zip(starts, ends)])
            q = query[tokens]
            out = torch.empty((tokens.numel(),) + tuple(output.shape[1:]), dtype=output.dtype)
            sched = ops.cpu_attn_get_scheduler_metadata(
                num_reqs=rows.numel(), num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                head_dim=self.head_size, seq_lens=sub_seq, dtype=query.dtype,
                query_start_loc=sub_qsl, causal=md.causal,
                sliding_window_size=self.sliding_window, isa=layer.isa,
                enable_kv_split=envs.VLLM_CPU_ATTN_SPLIT_KV, dynamic_causal=None,
                kv_cache_dtype=self.kv_cache_dtype)
        if self.sinks is not None and self.sinks.dtype not in (torch.bfloat16, torch.float32):
            self.sinks = self.sinks.to(torch.float32)
        ops.cpu_attention_with_kv_cache(
            query=q, key_cache=key_cache, value_cache=value_cache, output=out,
            query_start_loc=sub_qsl, seq_lens=sub_seq if not all_rows else seq_lens,
            scale=self.scale, causal=md.causal, alibi_slopes=self.alibi_slopes,
            sliding_window=self.sliding_window, block_table=staged_table,
            softcap=self.logits_soft_cap, scheduler_metadata=sched, s_aux=self.sinks,
            dynamic_causal=md.dynamic_causal if all_rows else None,
            k_scale=layer._k_scale_float, v_scale=layer._v_scale_float,
            kv_cache_dtype=self.kv_cache_dtype)
        if tokens is not None:
            output[tokens] = out

    def _pig(self, layer, query, output, kv_cache, plan):
        nb, nh, bs, d2 = kv_cache.shape
        if self._layer is None:
            self._layer = layer_index(layer.layer_name)
        pa = state.paged_attention(self.cfg, self.kv, self.num_layers, self.num_heads,
                                   self.num_kv_heads, self.head_size, bs, self.max_tokens,
                                   self.cfg.threads)
        n = plan.first
        if n:
            q = query[:n]
            q = q if q.is_contiguous() else q.contiguous()
            direct = output.dtype == q.dtype and output[:n].is_contiguous()
            out = output[:n] if direct else torch.empty_like(q)
        else:
            q = query[plan.tokens].contiguous()
            direct = False
            out = torch.empty_like(q)
        pa.decode(self._layer, plan.req_ids, q, kv_cache.view(nb, nh, 2 * bs, d2 // 2),
                  plan.table, plan.lens, out, self.scale)
        if direct:
            return
        if n:
            output[:n] = out.to(output.dtype)
        else:
            output[plan.tokens] = out.to(output.dtype)


class _Plan:
    """How one step's rows split between pig and vLLM's kernel (see PigAttentionImpl._plan)."""

    __slots__ = ("capable", "stock_rows", "all_stock", "pig_rows", "first", "tokens", "table",
                 "lens", "req_ids")

    def __init__(self, capable: bool) -> None:
        self.capable = capable
        self.stock_rows = self.pig_rows = self.tokens = self.table = self.lens = None
        self.all_stock = False
        self.first = 0
        self.req_ids = None


class PigAttentionBackend(CPUAttentionBackend):
    """CPU_ATTN with pig's decode rows and pig_vllm's row-major K (get_name() stays CPU_ATTN)."""

    @staticmethod
    def get_impl_cls():
        return PigAttentionImpl
