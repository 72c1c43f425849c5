"""vLLM's OpenAI server with pig_vllm (magicpig by environment variables), on loopback."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import MODEL, vllm_env

START_TIMEOUT = 420  # seconds: ~100 s here on 2 cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_openai_server(tmp_path):
    if not os.path.isdir(MODEL):
        pytest.skip(f"{MODEL} missing: run ./pig vllm-setup")
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL,
           "--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--dtype", "bfloat16",
           "--max-model-len", "8192", "--served-model-name", "smol",
           "--worker-cls", "pig_vllm.worker.PigWorker",
           "--additional-config", json.dumps({"pig": {"method": "dense"}})]
    # The environment wins over --additional-config: this server runs magicpig.
    env = vllm_env(PIG_VLLM_METHOD="magicpig", PIG_VLLM_MIN_TOKENS="0")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert proc.poll() is None, "server exited: " + (tmp_path / "server.log").read_text()[-4000:]
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "server not healthy in time"
            time.sleep(2)
        out = post(base + "/v1/completions", {"model": "smol", "prompt": "The capital of France is",
                                               "max_tokens": 8, "temperature": 0})
        assert out["choices"][0]["text"].startswith(" Paris"), out
        chat = post(base + "/v1/chat/completions", {
            "model": "smol", "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": "What is the capital of France?"}]})
        assert "Paris" in chat["choices"][0]["message"]["content"], chat
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                rc = proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = None
        else:
            rc = proc.returncode
        log.close()
    text = (tmp_path / "server.log").read_text()
    assert "pig_vllm: method=magicpig" in text, text[-4000:]
    assert rc == 0, f"server exit status {rc}: " + text[-4000:]
