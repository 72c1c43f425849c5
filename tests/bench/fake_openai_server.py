#!/usr/bin/env python3
"""A fake OpenAI-compatible server for pig-bench-serve's tests: loopback only, standard library.

It answers GET /v1/models (ids fake-model-a, fake-model-b), POST /tokenize and /detokenize with a
character tokenizer (a token is a Unicode code point, so a window of P tokens is P characters and
comes back as exactly P prompt tokens), and streams POST /v1/completions as Server-Sent Events
the way vLLM does: HTTP/1.1 chunked, the response headers at once, --first-token-delay before
the first token, --token-delay between tokens, one text chunk per token, a final chunk with
finish_reason, a usage chunk when stream_options.include_usage asks for it, then data: [DONE].
Each event is written in two HTTP chunks (cut mid-line) after a ': keep-alive' comment, so a
client must reassemble lines and skip comments.

Failure modes, by the completion request's arrival number n (1, 2, ...), first match wins:
--fail-every K (n % K == 0: HTTP 503), --cut-every K (the stream stops after half its tokens, no
[DONE], the connection closed), --malformed-every K (an event that is not JSON mid-stream).
--hang: completions are read, then never answered (until the server stops); --stall-after K:
a stream stops after K tokens and says nothing more (until the server stops). --eos-after K:
without "ignore_eos": true a request stops after K tokens (finish_reason "stop").
--tokenize content|prompt|none: pig-serve's and llama-server's shape ({"content"} ->
{"tokens"}, {"tokens"} -> {"content"}), vLLM's ({"prompt", "model"} -> {"tokens", "count"},
{"tokens"} -> {"prompt"}; the other shape gets 400), or no such endpoints (404).

Prefix cache: a completion's cached tokens are the longest prefix it shares with a prompt
received before (in the character tokenizer's tokens); --report-cached sends them as
usage.prompt_tokens_details.cached_tokens (OpenAI's field, as pig-serve and vLLM do).

GET /debug/requests lists what the completions received (the body, the prompt's length and
first 64 characters, its cached tokens, the Authorization header) and the most requests in
flight at once. It prints "fake-openai-server: listening on http://127.0.0.1:PORT" and serves
until killed or --lifetime seconds (so that a test that dies leaves no server behind).
"""
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODELS = ["fake-model-a", "fake-model-b"]


class State:
    def __init__(self, options):
        self.options = options
        self.lock = threading.Lock()
        self.arrivals = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.log = []
        self.prompts = []  # every prompt received, for the cached prefix
        self.stop = threading.Event()

    def cached_prefix(self, prompt):
        """The longest prefix prompt shares with a prompt received before (under the lock)."""
        best = 0
        for seen in self.prompts:
            n = min(len(seen), len(prompt))
            k = 0
            while k < n and seen[k] == prompt[k]:
                k += 1
            best = max(best, k)
        self.prompts.append(prompt)
        return best


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-openai-server"

    def log_message(self, *args):
        pass

    @property
    def state(self):
        return self.server.state

    def send_json(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_json(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            return None

    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list",
                                 "data": [{"id": m, "object": "model"} for m in MODELS]})
        elif self.path == "/debug/requests":
            with self.state.lock:
                self.send_json(200, {"requests": self.state.log,
                                     "max_in_flight": self.state.max_in_flight})
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self):
        body = self.read_json()
        shape = self.state.options.tokenize
        if self.path in ("/tokenize", "/detokenize") and shape == "none":
            self.send_json(404, {"error": "not found"})
        elif self.path == "/tokenize":
            self.tokenize(body, shape)
        elif self.path == "/detokenize":
            self.detokenize(body, shape)
        elif self.path == "/v1/completions":
            self.completions(body)
        else:
            self.send_json(404, {"error": "not found"})

    def tokenize(self, body, shape):
        key = "content" if shape == "content" else "prompt"
        if not isinstance(body, dict) or not isinstance(body.get(key), str) or (
                shape == "prompt" and "model" not in body):
            self.send_json(400, {"error": f"expected {key!r}"})
            return
        tokens = [ord(c) for c in body[key]]
        answer = {"tokens": tokens}
        if shape == "prompt":
            answer.update(count=len(tokens), max_model_len=1 << 20)
        self.send_json(200, answer)

    def detokenize(self, body, shape):
        if not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
            self.send_json(400, {"error": "expected 'tokens'"})
            return
        text = "".join(chr(t) for t in body["tokens"])
        self.send_json(200, {"content" if shape == "content" else "prompt": text})

    def completions(self, body):
        state = self.state
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            self.send_json(400, {"error": "expected 'prompt'"})
            return
        with state.lock:
            state.arrivals += 1
            n = state.arrivals
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            cached = state.cached_prefix(body["prompt"])
            logged = dict(body)
            logged.update(prompt_len=len(body["prompt"]), prompt_head=body["prompt"][:64],
                          cached_tokens=cached, authorization=self.headers.get("Authorization"),
                          arrival=n)
            state.log.append(logged)
        try:
            self.counted = True
            self.answer(body, n, cached)
        finally:
            self.leave()

    def leave(self):
        # A request stops counting as in flight before its [DONE] is written: a closed-loop
        # client sends its next request on [DONE], possibly before this handler has returned.
        if getattr(self, "counted", False):
            self.counted = False
            with self.state.lock:
                self.state.in_flight -= 1

    def answer(self, body, n, cached):
        options = self.state.options
        if options.hang:
            self.state.stop.wait(options.lifetime)
            self.close_connection = True
            return
        if options.fail_every and n % options.fail_every == 0:
            self.send_json(503, {"error": {"message": "overloaded (fake)", "code": 503}})
            return
        mode = None
        if options.cut_every and n % options.cut_every == 0:
            mode = "cut"
        elif options.malformed_every and n % options.malformed_every == 0:
            mode = "malformed"
        max_tokens = int(body.get("max_tokens") or 16)
        count = max_tokens
        if options.eos_after and not body.get("ignore_eos"):
            count = min(count, options.eos_after)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        self.event(None)  # a comment before anything: clients must skip it
        time.sleep(options.first_token_delay)
        for k in range(count):
            if k:
                time.sleep(options.token_delay)
            if options.stall_after and k == options.stall_after:
                self.state.stop.wait(options.lifetime)
                self.close_connection = True
                return
            if mode and k == count // 2:
                if mode == "malformed":
                    self.raw_event(b"data: {\"choices\": [{\"text\": oops")
                    break
                self.close_connection = True  # no [DONE], no final chunk
                return
            self.event({"id": f"cmpl-{n}", "object": "text_completion", "model": body["model"],
                        "choices": [{"index": 0, "text": f" t{k}", "finish_reason": None}]})
        finish = "length" if count == max_tokens else "stop"
        self.event({"id": f"cmpl-{n}", "object": "text_completion", "model": body["model"],
                    "choices": [{"index": 0, "text": "", "finish_reason": finish}]})
        stream_options = body.get("stream_options") or {}
        if stream_options.get("include_usage") and not options.no_usage:
            prompt_tokens = len(body["prompt"])
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": count,
                     "total_tokens": prompt_tokens + count}
            if options.report_cached:
                usage["prompt_tokens_details"] = {"cached_tokens": cached}
            self.event({"id": f"cmpl-{n}", "object": "text_completion", "choices": [],
                        "usage": usage})
        self.leave()
        self.raw_event(b"data: [DONE]")
        self.chunk(b"")

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def raw_event(self, line):
        end = b"\r\n" if self.state.options.crlf else b"\n"
        event = line + end + end
        half = len(event) // 2
        self.chunk(event[:half])
        self.chunk(event[half:])

    def event(self, value):
        if value is None:
            self.raw_event(b": keep-alive")
        else:
            self.raw_event(b"data: " + json.dumps(value).encode())


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0, help="0: the OS picks a free port")
    parser.add_argument("--first-token-delay", type=float, default=0.0, metavar="S")
    parser.add_argument("--token-delay", type=float, default=0.0, metavar="S")
    parser.add_argument("--eos-after", type=int, default=0, metavar="K")
    parser.add_argument("--fail-every", type=int, default=0, metavar="K")
    parser.add_argument("--cut-every", type=int, default=0, metavar="K")
    parser.add_argument("--malformed-every", type=int, default=0, metavar="K")
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--stall-after", type=int, default=0, metavar="K")
    parser.add_argument("--no-usage", action="store_true", help="never send a usage chunk")
    parser.add_argument("--report-cached", action="store_true",
                        help="send usage.prompt_tokens_details.cached_tokens")
    parser.add_argument("--crlf", action="store_true", help="end SSE lines with \\r\\n")
    parser.add_argument("--tokenize", choices=("content", "prompt", "none"), default="content")
    parser.add_argument("--lifetime", type=float, default=120.0, metavar="S")
    options = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", options.port), Handler)
    server.daemon_threads = True
    server.state = State(options)
    print(f"fake-openai-server: listening on http://127.0.0.1:{server.server_address[1]}",
          flush=True)
    timer = threading.Timer(options.lifetime, server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.state.stop.set()
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
