#!/usr/bin/env python3
"""Questions on one long document, pig-serve with and without its prefix cache (issue 51).

    bench/ab_prefix_cache.py BINARY [--doc-tokens 4096] [--questions 3] [--attention dense]
                             [--threads 2] [--max-tokens 8] [--together] [--cache-dir DIR]

For each setting (--no-prefix-cache, then the default, the cache on), one server on 127.0.0.1
(port 0); then --questions requests one after the other, each the same document (--doc-tokens
tokens of Debian's GPL-3 text, tokenized by the server) followed by a different question, greedy,
--max-tokens tokens. Prints each request's time to first token (streamed), its cached_tokens,
and its text; then the ratio of the later questions' mean TTFT, without / with the cache, and
whether the texts agree (they must: a hit gives the tokens of prefilling the whole prompt).
--together sends the questions at once (clients that arrive together on one document) and also
prints the time until every question has its first token. --cache-dir gives the cached server
the disk tier in DIR (emptied first) and runs a third server over it: the questions again after a
restart, the document read back from disk.
Everything binds and connects to loopback; every wait is bounded.
"""
import argparse
import http.client
import json
import sys
import threading
import time

from loopback import HOST, request, start, stop
TEXT = "/usr/share/common-licenses/GPL-3"
QUESTIONS = ["\n\nQuestion: who may copy this program?\nAnswer:",
             "\n\nQuestion: what must a distributor give the recipients?\nAnswer:",
             "\n\nQuestion: is there any warranty?\nAnswer:",
             "\n\nQuestion: what is a covered work?\nAnswer:"]


def ask(port, body):
    """Streams one completion: (seconds to the first token, text, usage)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=900)
    t0 = time.time()
    first, text, usage = None, "", None
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            sys.exit(f"request failed: {resp.status} {resp.read()[:300]!r}")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk.get("choices", []):
                if ch.get("text"):
                    first = first or time.time() - t0
                    text += ch["text"]
    finally:
        conn.close()
    return first, text, usage


def run(binary, args, cache, label=None):
    cmd = [binary, "--host", HOST, "--port", "0", "--threads", str(args.threads), "--quiet",
           "--parallel", str(max(args.questions, 8))]
    if not cache:
        cmd.append("--no-prefix-cache")
    elif args.cache_dir:
        cmd += ["--cache-dir", args.cache_dir]
    label = label or ("cache" if cache else "no cache")
    proc, port = start(cmd)
    try:
        _, text = request(port, "POST", "/tokenize", {"content": open(TEXT).read()})
        doc = json.loads(text)["tokens"][:args.doc_tokens]
        bodies = []
        for i in range(args.questions):
            _, text = request(port, "POST", "/tokenize",
                              {"content": QUESTIONS[i % len(QUESTIONS)], "add_special": False})
            bodies.append({"prompt": doc + json.loads(text)["tokens"],
                           "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
                           "stream": True, "stream_options": {"include_usage": True},
                           "pig": {"attention": args.attention}})
        results = [None] * len(bodies)
        t0 = time.time()
        if args.together:
            threads = [threading.Thread(target=lambda i=i, b=b: results.__setitem__(i, ask(port, b)))
                       for i, b in enumerate(bodies)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(1800)
        else:
            for i, b in enumerate(bodies):
                results[i] = ask(port, b)
        out = []
        for i, (ttft, answer, usage) in enumerate(results):
            cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            out.append((ttft, cached, answer))
            print(f"  {label} question {i}: TTFT {ttft:.2f} s, "
                  f"{usage['prompt_tokens']} prompt tokens, {cached} cached: {answer!r}")
        if args.together:
            print(f"  every question answered its first token within "
                  f"{max(r[0] for r in results):.2f} s; all done in {time.time() - t0:.2f} s")
        return out
    finally:
        stop(proc)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("binary")
    p.add_argument("--doc-tokens", type=int, default=4096)
    p.add_argument("--questions", type=int, default=3)
    p.add_argument("--attention", default="dense")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--together", action="store_true")
    p.add_argument("--cache-dir", default="")
    args = p.parse_args()
    if args.questions < 2:
        sys.exit("--questions: at least 2 (the first fills the cache)")
    if args.cache_dir:
        import shutil
        shutil.rmtree(args.cache_dir, ignore_errors=True)
    off = run(args.binary, args, False)
    on = run(args.binary, args, True)
    if args.cache_dir:
        again = run(args.binary, args, True, "after a restart")
        print(f"after a restart over {args.cache_dir}: first question TTFT {again[0][0]:.2f} s "
              f"({again[0][1]} tokens from disk), texts "
              f"{'identical' if all(a[2] == b[2] for a, b in zip(off, again)) else 'DIFFER'}")
    later = lambda r: sum(x[0] for x in r[1:]) / (len(r) - 1)  # noqa: E731
    same = all(a[2] == b[2] for a, b in zip(off, on))
    print(f"{args.attention}, {args.doc_tokens}-token document: later questions' TTFT "
          f"{later(off):.2f} s without the cache, {later(on):.2f} s with it: "
          f"{later(off) / later(on):.1f}x; first question {off[0][0]:.2f} / {on[0][0]:.2f} s; "
          f"texts {'identical' if same else 'DIFFER'}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
