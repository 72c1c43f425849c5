"""pig_vllm's per-process state: the pig.PagedAttention object and the row -> request map.

One PagedAttention serves every layer of the worker's model; it keeps, per (request, layer,
kv-head), the LSH index MagicPIG needs between decode steps. The worker (pig_vllm.worker) frees a
request's state when the scheduler reports it finished or preempted, and when a preempted
request resumes (its cache pages were recomputed; the index is rebuilt from them on its next
decode row, as for a request that came out of the prefix cache).
"""
from __future__ import annotations

import atexit
import os
import threading

_lock = threading.Lock()
_paged = None          # pig.PagedAttention, created by the first layer that decodes with pig
_paged_key = None      # the arguments it was created with
_runner = None         # the worker's model runner (its input_batch names the rows)
frees = 0              # free() calls that dropped something (tests, diagnostics)
preempted = 0          # preempted requests the scheduler reported


def set_model_runner(runner) -> None:
    global _runner
    _runner = runner


def request_ids(rows: list[int]) -> list[str]:
    """The request ids of batch rows (row i of query_start_loc / seq_lens / block_table)."""
    if _runner is None:
        raise RuntimeError(
            "pig_vllm: no model runner registered; run vLLM with "
            "worker_cls='pig_vllm.worker.PigWorker' (server: --worker-cls pig_vllm.worker.PigWorker)")
    ids = _runner.input_batch.req_ids
    out = []
    for r in rows:
        rid = ids[r] if r < len(ids) else None
        if rid is None:
            raise RuntimeError(f"pig_vllm: batch row {r} has no request (input_batch holds {len(ids)})")
        out.append(rid)
    return out


def check_rows(req_ids: list[str], block_table) -> None:
    """Debug check (PIG_VLLM_CHECK=1): each row's block table is its request's blocks."""
    for i, rid in enumerate(req_ids):
        blocks = _runner.requests[rid].block_ids[0]
        row = block_table[i, :len(blocks)].tolist()
        if row != list(blocks):
            raise RuntimeError(f"pig_vllm: row {i} is not request {rid}: table {row[:8]}... vs "
                               f"the request's blocks {list(blocks)[:8]}...")


def paged_attention(cfg, kv, num_layers, num_q_heads, num_kv_heads, head_dim, block_size,
                    max_tokens, threads):
    """The process's pig.PagedAttention over a cache of `kv` rows ("bf16" or "f32"), created on
    first use (every layer shares it). A tensor-parallel rank's layers see its own heads only."""
    global _paged, _paged_key
    key = (cfg, kv, num_layers, num_q_heads, num_kv_heads, head_dim, block_size, max_tokens,
           threads)
    with _lock:
        if _paged is None:
            import pig

            # threads 0: the CPUs this worker may run on. vLLM binds a CPU worker to its OpenMP
            # cores (VLLM_CPU_OMP_THREADS_BIND) before the model runs, and pig's pool threads
            # inherit that binding: more threads than those CPUs would only contend.
            n = threads or len(os.sched_getaffinity(0))
            _paged = pig.PagedAttention(cfg.attention_spec(kv), num_layers, num_q_heads,
                                        num_kv_heads, head_dim, block_size,
                                        max_tokens=max_tokens, threads=n)
            from vllm.logger import init_logger

            init_logger("vllm.pig_vllm.state").info(
                "pig_vllm: pig.PagedAttention: %s, %d threads, %s", _paged.stats["attention"], n,
                _paged.stats["kernels"])
            _paged_key = key
        elif key != _paged_key:
            raise RuntimeError(f"pig_vllm: layers disagree on the paged attention {key} vs "
                               f"{_paged_key}")
        return _paged


def free(req_id: str) -> None:
    """Drop every layer's state of the request (unknown ids: nothing)."""
    global frees
    pa = _paged
    if pa is not None and req_id in pa.requests:
        pa.free(req_id)
        frees += 1


def live_requests() -> list[str]:
    """Requests that hold state (sorted)."""
    pa = _paged
    return list(pa.requests) if pa is not None else []


def stats() -> dict:
    pa = _paged
    if pa is None:
        return {"requests": 0, "bytes": 0, "frees": frees, "preempted": preempted}
    s = dict(pa.stats)
    s.update(requests=len(pa.requests), bytes=pa.bytes, frees=frees, preempted=preempted)
    return s


def on_schedule(scheduler_output) -> None:
    """Frees what the scheduler says is gone, before the step runs."""
    global preempted
    for rid in scheduler_output.finished_req_ids or ():
        free(rid)
    for rid in getattr(scheduler_output, "preempted_req_ids", None) or ():
        preempted += 1
        free(rid)
    cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
    for rid in getattr(cached, "resumed_req_ids", None) or ():
        free(rid)


@atexit.register
def _release() -> None:
    """Drop the pig object before the interpreter's teardown (nanobind reports leaks then)."""
    global _paged, _runner
    _paged = None
    _runner = None
