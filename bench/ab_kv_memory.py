#!/usr/bin/env python3
"""The memory pig-serve holds for running requests, two binaries side by side (issue 50's target).

    bench/ab_kv_memory.py A_BINARY B_BINARY [--requests 8] [--prompt-tokens 1024]
                          [--attention dense] [--kv bf16] [--threads 2]

For each binary in turn: a server on 127.0.0.1 (port 0, the model's context: 8k for the default
model), its resident memory once healthy; then --requests streaming completions at once, each a
prompt of --prompt-tokens tokens (Debian's GPL-3 text, tokenized by the server) with max_tokens
the rest of the context and ignore_eos, so that each may grow to the whole context; once every
stream has sent 4 tokens, the server's resident memory (VmRSS) and its /metrics (KV bytes held,
bytes reserved, the KV pools' committed bytes); then the streams are closed and the server stopped
(SIGTERM, 30 s at most). Prints a line a binary and the ratio B / A of the memory the requests
added. Everything binds and connects to loopback; every wait is bounded.
"""
import argparse
import http.client
import json
import sys
import threading

from loopback import HOST, metrics, request, start, stop
TEXT = "/usr/share/common-licenses/GPL-3"


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(binary, args):
    proc, port = start([binary, "--host", HOST, "--port", "0", "--threads", str(args.threads),
                        "--parallel", str(args.requests), "--memory-budget", "0"])
    try:
        idle = rss_bytes(proc.pid)
        status, text = request(port, "POST", "/tokenize", {"content": open(TEXT).read()})
        tokens = json.loads(text)["tokens"][:args.prompt_tokens]
        status, text = request(port, "GET", "/v1/models")
        context = json.loads(text)["data"][0].get("max_model_len", 8192)
        body = {"prompt": tokens, "max_tokens": context - len(tokens), "ignore_eos": True,
                "temperature": 0, "stream": True,
                "pig": {"attention": args.attention, "kv": args.kv}}
        started = threading.Barrier(args.requests + 1, timeout=600)
        done = threading.Event()
        errors = []

        def client():
            conn = http.client.HTTPConnection(HOST, port, timeout=600)
            try:
                conn.request("POST", "/v1/completions", body=json.dumps(body),
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                if resp.status != 200:
                    errors.append(f"{resp.status} {resp.read()[:200]!r}")
                    started.abort()
                    return
                chunks = 0
                while chunks < 4:
                    line = resp.fp.readline()
                    if not line:
                        break
                    if line.startswith(b"data: {"):
                        chunks += 1
                started.wait()
                done.wait(600)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
                started.abort()
            finally:
                conn.close()

        threads = [threading.Thread(target=client) for _ in range(args.requests)]
        for t in threads:
            t.start()
        try:
            started.wait()
        except threading.BrokenBarrierError:
            sys.exit(f"{binary}: a request failed: {errors}")
        loaded = rss_bytes(proc.pid)
        m = metrics(port)
        done.set()
        for t in threads:
            t.join(60)
        kv = sum(v for k, v in m.items() if k.startswith("pig_kv_bytes"))
        return {"binary": binary, "idle": idle, "loaded": loaded, "kv": kv,
                "reserved": m.get("pig_memory_reserved_bytes", 0),
                "resident": m.get("pig_kv_resident_bytes"), "context": context}
    finally:
        stop(proc)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--attention", default="dense")
    p.add_argument("--kv", default="bf16")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    mib = 1 << 20
    added = []
    for binary in (args.a, args.b):
        r = measure(binary, args)
        added.append(r["loaded"] - r["idle"])
        resident = "n/a" if r["resident"] is None else f"{r['resident'] / mib:.0f} MiB"
        print(f"{binary}: {args.requests} x {args.prompt_tokens}-token prompts, context "
              f"{r['context']}, {args.attention} {args.kv}: RSS {r['idle'] / mib:.0f} -> "
              f"{r['loaded'] / mib:.0f} MiB (+{added[-1] / mib:.0f}), KV held "
              f"{r['kv'] / mib:.0f} MiB, reserved {r['reserved'] / mib:.0f} MiB, KV pools "
              f"{resident}")
    print(f"memory the requests added, B / A: {added[1] / max(added[0], 1):.3f}")


if __name__ == "__main__":
    main()
