"""Shared set-up of pig_vllm's tests: the model, the environment of the vLLM processes, and one
driver process (tests/driver.py) per vLLM configuration, run once and shared by its tests."""
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
    job = dict(job, model=MODEL)
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
