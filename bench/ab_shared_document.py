#!/usr/bin/env python3
"""Clients asking questions of one long document at once, dense against magicpig (issue 51).

    bench/ab_shared_document.py BINARY [--doc-tokens 8000] [--clients 1,8]
                                [--methods dense,magicpig] [--max-tokens 64] [--threads 2]
                                [--mean-window prefix|N|0]

For each method and each client count N: one pig-serve on 127.0.0.1 (port 0, the prefix cache on,
--parallel N); N clients send, at once, the same document (--doc-tokens tokens of the Debian
FAQ) followed by a different question, greedy, --max-tokens tokens each (ignore_eos). While they
run, /metrics is read every 0.1 s for the peak of what their attention holds:
pig_kv_resident_bytes (the KV pool's committed blocks: a shared block once) + pig_index_bytes
(each request's own index) + pig_shared_index_bytes (the indexes over the cached document, once),
and the server's peak RSS (VmHWM) is read when they are done. Prints per run the last first token,
the steady decode rate (output tokens/s while every request that found the document cached is
past its second token, which waits for the index build, and none of them has finished), the
memory peak, and
then the ratios the issue
asks for: memory(N) / memory(1) per method and magicpig's output tokens/s over dense's at each N.
Everything binds and connects to loopback; every wait is bounded.
"""
import argparse
import gzip
import http.client
import json
import sys
import threading
import time

from loopback import HOST, metrics, request, start, stop

TEXT = "/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz"  # 42k tokens (package debian-faq)
QUESTIONS = ["Who may copy this program?", "What must a distributor give the recipients?",
             "Is there any warranty?", "What is a covered work?", "What is the source code?",
             "May I charge a fee for copies?", "What happens if I violate the license?",
             "Which version of the license applies?", "What is a user product?",
             "Can I add terms to this license?"]


def ask(port, body, out, i):
    """Streams one completion into out[i]: (send time, the time of each text chunk, output
    tokens, cached tokens)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=1800)
    t0 = time.time()
    stamps = []
    usage = {}
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"request failed: {resp.status} {resp.read()[:300]!r}")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            if any(ch.get("text") for ch in chunk.get("choices", [])):
                stamps.append(time.time())
    finally:
        conn.close()
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    out[i] = (t0, stamps, usage.get("completion_tokens", 0), cached)


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run(args, method, clients):
    cmd = [args.binary, "--host", HOST, "--port", "0", "--threads", str(args.threads), "--quiet",
           "--parallel", str(clients)]
    if args.mean_window:
        cmd += ["--mean-window", args.mean_window]
    proc, port = start(cmd)
    try:
        with gzip.open(TEXT, "rt") as f:
            _, text = request(port, "POST", "/tokenize", {"content": f.read()})
        doc = json.loads(text)["tokens"][:args.doc_tokens]
        bodies = []
        for i in range(clients):
            q = f"\n\nQuestion {i + 1}: {QUESTIONS[i % len(QUESTIONS)]}\nAnswer:"
            _, text = request(port, "POST", "/tokenize", {"content": q, "add_special": False})
            bodies.append({"prompt": doc + json.loads(text)["tokens"],
                           "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
                           "stream": True, "stream_options": {"include_usage": True},
                           "pig": {"attention": method}})
        rss0 = peak_rss_mib(proc.pid)
        results = [None] * clients
        threads = [threading.Thread(target=ask, args=(port, b, results, i))
                   for i, b in enumerate(bodies)]
        for t in threads:
            t.start()
        peak = {"kv": 0.0, "index": 0.0, "shared": 0.0, "total": 0.0}
        while any(t.is_alive() for t in threads):
            m = metrics(port)
            kv = m.get("pig_kv_resident_bytes", 0)
            index = sum(v for k, v in m.items() if k.startswith("pig_index_bytes"))
            shared = m.get("pig_shared_index_bytes", 0)
            for k, v in (("kv", kv), ("index", index), ("shared", shared),
                         ("total", kv + index + shared)):
                peak[k] = max(peak[k], v)
            time.sleep(0.1)
        for t in threads:
            t.join(60)
        if any(r is None for r in results):
            sys.exit(f"{method}, {clients} clients: a request failed (see above)")
        rss = peak_rss_mib(proc.pid)
        # Steady decode: the requests that found the document cached (all but the one that
        # prefilled it, which decodes alone while they prefill their questions) past their first
        # two tokens
        # (the first comes from the prefill, the second waits for the index), none finished yet;
        # every request's tokens in that span count.
        late = [r for r in results if r[3] > 0] or results
        begin = max(r[1][2] for r in late)
        end = min(r[1][-1] for r in late)
        steady = sum(sum(1 for t in r[1] if begin < t <= end) for r in results)
        tps = steady / (end - begin) if end > begin else float("nan")
        mib = lambda b: b / 2**20  # noqa: E731
        print(f"  {method}, {clients} client(s): last first token "
              f"{max(r[1][0] - r[0] for r in results):.2f} s, steady decode {tps:.2f} output "
              f"tok/s over {end - begin:.1f} s, cached tokens {[r[3] for r in results]}; peak KV {mib(peak['kv']):.0f} MiB + own "
              f"index {mib(peak['index']):.0f} + shared index {mib(peak['shared']):.0f} = "
              f"{mib(peak['total']):.0f} MiB; RSS {rss0:.0f} -> {rss:.0f} MiB", flush=True)
        return {"tps": tps, "memory": peak["total"], "rss": rss - rss0}
    finally:
        stop(proc)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("binary")
    p.add_argument("--doc-tokens", type=int, default=8000)
    p.add_argument("--clients", default="1,8")
    p.add_argument("--methods", default="dense,magicpig")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mean-window", default="", help="pig-serve's --mean-window (its default: "
                   "prefix)")
    args = p.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    methods = args.methods.split(",")
    res = {(m, n): run(args, m, n) for m in methods for n in counts}
    for m in methods:
        for n in counts[1:]:
            print(f"{m}: {n} clients hold {res[(m, n)]['memory'] / res[(m, counts[0])]['memory']:.2f}x "
                  f"the KV + index of {counts[0]} (RSS growth "
                  f"{res[(m, n)]['rss'] / max(res[(m, counts[0])]['rss'], 1):.2f}x)")
    if "dense" in methods:
        for m in methods:
            if m != "dense":
                for n in counts:
                    print(f"{m} / dense output tok/s, {n} client(s): "
                          f"{res[(m, n)]['tps'] / res[('dense', n)]['tps']:.2f}x")


if __name__ == "__main__":
    main()
