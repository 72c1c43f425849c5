"""pig_vllm's configuration: environment variables over vLLM's `additional_config["pig"]`.

Every setting can come from an environment variable of the worker process or from the "pig"
entry of vLLM's additional_config (`LLM(..., additional_config={"pig": {...}})`, or
`--additional-config '{"pig": {...}}'` for the server). **The environment wins** where both name
a setting: additional_config is the deployment's default, an environment variable the operator's
override for one process tree.

| env variable           | additional_config["pig"] key | meaning                                          |
|------------------------|------------------------------|--------------------------------------------------|
| PIG_VLLM_METHOD        | method                       | stock or a pig method (default magicpig)         |
| PIG_VLLM_LSH           | lsh                          | "K=10,L=150,t=2" (pig-run's --lsh; default pig's)|
| PIG_VLLM_SINK          | sink                         | sink tokens (default pig's, 4)                   |
| PIG_VLLM_LOCAL         | local                        | local window (default pig's, 64)                 |
| PIG_VLLM_DENSE_LAYERS  | dense_layers                 | "0,15" (pig-run's --dense-layers)                |
| PIG_VLLM_TRANSFORM     | transform                    | pig-run's --transform (default plain)            |
| PIG_VLLM_BUDGET        | budget                       | topk/oracle/quest/lsh-hybrid: pig-run's --budget |
| PIG_VLLM_HYBRID        | hybrid                       | lsh-hybrid: pig-run's --hybrid                   |
| PIG_VLLM_MEAN_WINDOW   | mean_window                  | magicpig: centre on the first N keys (default 0: |
|                        |                              | all); N > 0: requests on vLLM's shared prefix    |
|                        |                              | blocks share one index over them                 |
| PIG_VLLM_MIN_TOKENS    | min_tokens                   | decode rows of shorter sequences go to the stock |
|                        |                              | kernel (default: sink + local + 16 for sampling  |
|                        |                              | methods, 0 for dense)                            |
| PIG_VLLM_THREADS       | threads                      | pig's decode thread pool (default 0: the CPUs    |
|                        |                              | the worker is bound to)                          |

Methods: "stock" runs vLLM's own CPU kernel for every row (over pig_vllm's cache layout, through
the staging copy: the plugin's overhead, no pig kernel); pig's methods (dense, magicpig, topk,
oracle, quest, lsh-hybrid) run pig's attention (pig.PagedAttention) for the decode rows of
sequences of at least min_tokens tokens. pig's q8 rows are not served: the cache is vLLM's.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

METHODS = ("stock", "dense", "magicpig", "topk", "oracle", "quest", "lsh-hybrid")

# key -> (env variable, parser)
_FIELDS: dict[str, tuple[str, Any]] = {
    "method": ("PIG_VLLM_METHOD", str),
    "lsh": ("PIG_VLLM_LSH", str),
    "sink": ("PIG_VLLM_SINK", int),
    "local": ("PIG_VLLM_LOCAL", int),
    "dense_layers": ("PIG_VLLM_DENSE_LAYERS", str),
    "transform": ("PIG_VLLM_TRANSFORM", str),
    "budget": ("PIG_VLLM_BUDGET", float),
    "hybrid": ("PIG_VLLM_HYBRID", str),
    "mean_window": ("PIG_VLLM_MEAN_WINDOW", int),
    "min_tokens": ("PIG_VLLM_MIN_TOKENS", int),
    "threads": ("PIG_VLLM_THREADS", int),
}


@dataclasses.dataclass(frozen=True)
class PigConfig:
    method: str = "magicpig"
    lsh: str = ""
    sink: int | None = None
    local: int | None = None
    dense_layers: str | None = None
    transform: str = "plain"
    budget: float | None = None
    hybrid: str = ""
    mean_window: int | None = None
    min_tokens: int | None = None
    threads: int = 0

    def attention_spec(self, kv: str = "bf16"):
        """The pig.AttentionSpec of this configuration (not for method "stock") over a cache of
        `kv` rows (the model's dtype: bf16, or f32)."""
        import pig

        return pig.AttentionSpec(self.method, lsh=self.lsh, kv=kv, sink=self.sink,
                                 local=self.local, dense_layers=self.dense_layers,
                                 transform=self.transform, budget=self.budget, hybrid=self.hybrid,
                                 mean_window=self.mean_window)

    def effective_min_tokens(self, spec=None) -> int:
        """Decode rows of sequences shorter than this go to the stock kernel."""
        if self.min_tokens is not None:
            return self.min_tokens
        if self.method in ("stock", "dense"):
            return 0
        spec = spec if spec is not None else self.attention_spec()
        # pig indexes a request from sink + local + 16 tokens on (docs/PYTHON.md) and attends
        # shorter ones densely (every sparse method); the stock kernel gives those vLLM's own
        # numerics instead.
        return int(spec.sink) + int(spec.local) + 16


def load(additional_config: dict | None = None, environ=None) -> PigConfig:
    """The configuration: environ (default os.environ) over additional_config["pig"]."""
    environ = os.environ if environ is None else environ
    base = dict((additional_config or {}).get("pig") or {})
    unknown = set(base) - set(_FIELDS)
    if unknown:
        raise ValueError(f"pig_vllm: unknown additional_config['pig'] keys {sorted(unknown)}; "
                         f"known: {sorted(_FIELDS)}")
    values: dict[str, Any] = {}
    for key, (env, parse) in _FIELDS.items():
        raw = environ.get(env)
        if raw is not None and raw != "":
            try:
                values[key] = parse(raw)
            except ValueError as e:
                raise ValueError(f"pig_vllm: {env}={raw!r}: {e}") from None
        elif key in base and base[key] is not None:
            values[key] = parse(base[key])
    cfg = PigConfig(**values)
    if cfg.method not in METHODS:
        raise ValueError(f"pig_vllm: method {cfg.method!r} is not served; choose one of {METHODS}")
    return cfg
