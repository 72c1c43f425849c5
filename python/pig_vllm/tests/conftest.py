"""Shared set-up of pig_vllm's tests: the model, the environment of the vLLM processes, one
driver process (tests/driver.py) per vLLM configuration, run once and shared by its tests, and
vLLM's stock backend's answers (the `stock` fixture) that test_llm.py and test_server.py compare
pig's with."""
import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)                      # python/pig_vllm
ROOT = os.path.dirname(os.path.dirname(PKG))     # the repository
CACHE = os.environ.get("PIG_CACHE", os.path.expanduser("~/.cache/pig"))
MODEL = os.environ.get("PIG_VLLM_MODEL", os.path.join(CACHE, "smollm2-135m-instruct-hf"))

sys.path.insert(0, HERE)

# The tests call vLLM's CPU kernels in this process (tests/test_layout.py), outside vLLM's worker,
# which is what asks Linux for AMX's tile permission: without it vLLM's AMX attention dies of an
# illegal instruction on an AMX CPU (Xeon 4th generation and later).
from pig_vllm import amx  # noqa: E402

amx.request()


def vllm_env(**extra) -> dict:
    """The environment of a vLLM process: pig and pig_vllm importable, a 1 GiB KV cache
    (vLLM's CPU engine refuses to start without VLLM_CPU_KVCACHE_SPACE here)."""
    env = dict(os.environ)
    path = [os.path.join(ROOT, "build", "python"), PKG]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    for k in list(env):
        if k.startswith("PIG_VLLM_") and k != "PIG_VLLM_MODEL":
            del env[k]  # the configurations below say what they run
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture(scope="session")
def tokenizer():
    if not os.path.isdir(MODEL):
        pytest.skip(f"{MODEL} missing: run ./pig vllm-setup")
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(MODEL)


def run_driver(tmp_path_factory, name: str, job: dict, timeout: int = 900, **env) -> dict:
    """Runs one configuration's tasks in a fresh vLLM (tests/driver.py); returns its results."""
    d = tmp_path_factory.mktemp(name)
    job = dict({"model": MODEL}, **job)  # the default model unless the job names one
    (d / "job.json").write_text(json.dumps(job))
    if job.get("pig") is None:
        env.setdefault("VLLM_PLUGINS", "none")  # vLLM's stock backend: pig_vllm not loaded
    else:
        # every pig row's block table checked against its request's own blocks, every step
        env.setdefault("PIG_VLLM_CHECK", "1")
    t = time.monotonic()
    p = subprocess.run([sys.executable, os.path.join(HERE, "driver.py"), str(d / "job.json"),
                        str(d / "out.json")], env=vllm_env(**env), cwd=str(d), timeout=timeout,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (d / "log.txt").write_text(p.stdout)
    if p.returncode != 0:
        pytest.fail(f"{name}: driver exited {p.returncode}; its log's end:\n{p.stdout[-6000:]}")
    out = json.loads((d / "out.json").read_text())
    print(f"[{name}] {time.monotonic() - t:.0f} s, {out['_times']}", file=sys.stderr)
    return out


# --- the prompts, and what vLLM's stock backend answers them ------------------------------------

NEW = 32  # tokens generated per prompt, unless a task says otherwise
COMPLETION = "The capital of France is"
CHAT = "What is the capital of France?"


def gen(name, prompts, max_tokens=NEW, **kw):
    return dict(name=name, prompts=prompts, max_tokens=max_tokens, ignore_eos=True, **kw)


@pytest.fixture(scope="session")
def prompts(tokenizer):
    from prompts import text_prompt
    short = tokenizer.encode(COMPLETION, add_special_tokens=False)
    return {
        "short": [short, text_prompt(tokenizer, 40, offset=3000)],   # under sink + local (68)
        "long": [text_prompt(tokenizer, 1000)],
        # 8 requests of different lengths, batched by vLLM, each also run alone
        "eight": [text_prompt(tokenizer, n, offset=997 * i) for i, n in
                  enumerate([90, 150, 300, 500, 800, 1100, 1600, 2200])],
        "prefix": [text_prompt(tokenizer, 1500, offset=5000)],
        "preempt": [text_prompt(tokenizer, 300, offset=1500 * i) for i in range(4)],
        # the target: no state left after 100 requests (each past min_tokens: indexed)
        "hundred": [text_prompt(tokenizer, 120, offset=53 * i) for i in range(100)],
    }


@pytest.fixture(scope="session")
def stock(tmp_path_factory, prompts):
    """vLLM's stock backend (the plugin not loaded): the answers pig's are compared with, top two
    log-probabilities recorded. "chat" is test_server.py's chat request (its completion request is
    "short"'s first prompt); like the server, it stops at the end of generation."""
    return run_driver(tmp_path_factory, "stock", {"pig": None, "tasks": [
        gen("short", prompts["short"], logprobs=2), gen("long", prompts["long"], logprobs=2),
        dict(name="chat", prompts=[{"chat": CHAT}], max_tokens=16, logprobs=2)]})


def first_difference(a, b):
    return next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)


def near_tie_or_equal(got, want, what):
    """got's tokens equal want's (over the shorter of the two), or part where want's top two are
    within 0.25 in log-probability (the logits are bfloat16: one ulp at 16..32 is 0.125) and got
    took want's second choice. vLLM's own greedy answers part like this between runs whose
    attention rounds differently: between a batched and a solo run, between a prompt's first run
    and its run from the prefix cache, and on an AMX CPU between two processes (README, Tests)."""
    j = first_difference(got["tokens"], want["tokens"])
    if j is None:
        return
    (t1, lp1), (t2, lp2) = want["top"][j][:2]
    other = got["top"][j] if got.get("top") else None
    print(f"{what}: parts at step {j}: top two {t1}:{lp1:.4f} {t2}:{lp2:.4f}, other {other}")
    # 0.25 itself occurs (measured on the Xeon); the log-probabilities are float32 differences of
    # bf16 logits from one log-sum-exp, so 1e-4 absorbs their rounding, not another ulp.
    assert lp1 - lp2 <= 0.25 + 1e-4 and got["tokens"][j] == t2, (what, j, want["top"][j], other)
