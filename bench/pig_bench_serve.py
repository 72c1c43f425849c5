#!/usr/bin/env python3
"""pig-bench-serve: a load benchmark of any OpenAI-compatible completions server (pig-serve,
vLLM, llama-server, ...) on loopback, reporting what `vllm bench serve` reports.

pig-bench-serve --url http://127.0.0.1:8080 --clients 8 --requests 64 \\ --prompt-tokens 16384
--output-tokens 256 --ignore-eos \\ --pig-json '{"attention": "magicpig"}' --label "magicpig 16k
c=8" --json run.json

Workload. --clients N threads each send their next request as soon as their previous one has
finished (a closed loop) until --requests M (default N) have been sent. Every request is POST
/v1/completions with {"model", "prompt", "max_tokens": O, "temperature": 0, "stream": true,
"stream_options": {"include_usage": true}}, plus "ignore_eos": true with --ignore-eos (vLLM's
and llama-server's field; OpenAI has none), "pig": {...} with --pig-json (pig-serve's
extension), and the members of --extra-json merged into the top level last (they override the
fields above). Servers ignore fields they do not know.

Prompts are windows of Debian's texts: /usr/share/common-licenses/* (base-files) and the Debian
FAQ (/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz, package debian-faq), each file once and
each paragraph once (the licenses repeat paragraphs across versions), joined into one ring.
Request i starts at its own offset drawn from --seed, wrapping around the ring's end; offsets
whose first 32 tokens (128 characters) equal another prompt's are drawn again, so that no two
prompts share a prefix (a server's prefix cache cannot help). When the server has POST /tokenize
and /detokenize (pig-serve and llama-server: {"content": TEXT} -> {"tokens": [...]} and back;
vLLM: {"prompt": TEXT, "model": M} -> {"tokens": [...]}, back as {"prompt": TEXT}; both shapes
are tried) the corpus is tokenized once, in pieces of ~200 KB cut at whitespace, and every
prompt is the detokenized text of exactly --prompt-tokens tokens. Without them a prompt is 4
characters per token, and the report says so. The prompt tokens reported are the server's
(usage.prompt_tokens): detokenized text need not tokenize back to the same count.

Workloads that share prefixes (a server's prefix cache: pig-serve's, vLLM's automatic prefix
caching), each off by default. --shared-doc: every prompt is ONE document, a single window of
--prompt-tokens tokens at an offset drawn from --seed, followed by a question of its own: " Q
(question n)\\nAnswer:", Q one of 8 fixed questions (request i asks the (i mod 8)-th) and
n = i + 1. The questions' first words differ, so that where a tokenizer joins a word to the space
before it (BPE, SentencePiece) the prompts part at the first token after the document. --turns
T: each client holds conversations of T turns; a conversation's turn 1 is its own window (drawn
as above, distinct heads) plus question 1, and turn k is turn k-1's prompt, its answer (the text
streamed back) and question k, sent when turn k-1 has finished. A turn counts as one request
against --requests (default --clients x T; the last conversation is cut short when T does not
divide it); a failed turn ends its conversation, whose later turns are not sent. The two do not
combine. The prompt tokens are then the document's and the questions' (and the answers'), as the
server counts them.

Measurements (all in one process clock, time.perf_counter). Every request opens its own
connection, and its clock starts just before that (a loopback connect costs ~0.1 ms). The events
of its Server-Sent Events stream are parsed by the specification (data: lines joined, dispatched
at a blank line, ':' comments and other fields ignored, \\r\\n, \\n or \\r line ends); an event
whose choices carry text is a text chunk, stamped when its blank line is read. TTFT: send to the
first text chunk. ITL: the gaps between consecutive text chunks (a server that sends several
tokens per chunk has fewer, longer gaps). Latency: send to "data: [DONE]". TPOT: (latency -
TTFT) / (output tokens - 1) per request with at least two output tokens (vLLM's definition).
Output tokens: usage.completion_tokens of the last usage in the stream, else the number of text
chunks (the report says when). Decode-phase output tok/s: output tokens / (last text chunk of
any request - first text chunk of any request). Steady output tok/s: text chunks stamped between
the last request's first chunk and the first request's last chunk, over that span, when every
request had begun decoding before any finished (all of them running at once: the batch's decode
rate without the ramp; one chunk is one token for pig-serve, vLLM and llama-server). Totals and throughputs count successful
requests; the duration runs from the first request sent to the last one finished. Percentiles
are numpy's default (linear interpolation). Cached prompt tokens: usage.prompt_tokens_details.
cached_tokens (OpenAI's field; pig-serve and vLLM send it), per request and in all, with the
prompt tokens of the requests that reported it ("X of Y"); the report leaves the line out when
no request had it. With --shared-doc, the TTFT of the first request sent (it prefills the
document) against the TTFT of the others; with --turns, the TTFT of first turns against that of
later turns (a prefix cache makes the later ones short).

A request fails, with its reason, on an HTTP status other than 200, a connection error, an event
that is not JSON or carries "error", a stream that ends without [DONE], or the deadline; the run
goes on. --timeout S bounds the whole run, preparation included: requests not sent by then are
not sent, running ones are abandoned at the deadline (their sockets time out) and fail as
"deadline".

Only loopback servers: --url must name 127.0.0.0/8, ::1 or localhost (the project's benchmarks
talk to no other machine).

Output: the report on stdout. --json FILE writes one object: the run's settings (label, url,
model, clients, requests, prompt_tokens_requested, output_tokens_requested, ignore_eos, pig,
extra, seed, timeout_s, shared_doc, turns, conversations), how the prompts were made (prompts:
method "tokenize" or "chars", tokenize_shape, corpus_files, corpus_chars, corpus_tokens, offsets:
one per prompt, per conversation with --turns, the document's alone with --shared-doc), the
figures (completed, failed, not_sent, not_sent_after_failed_turn, failure_reasons {reason:
count}, first_failures, duration_s, total_input_tokens, mean_prompt_tokens, total_output_tokens,
mean_output_tokens, request_throughput, output_throughput, total_token_throughput, decode_span_s,
decode_output_throughput, steady_span_s, steady_output_throughput, deadline_s (the deadline,
from the first request sent), cached_prompt_tokens (X, null when no request reported it),
cached_usage_prompt_tokens (Y), cached_usage_requests, mean_cached_tokens; ttft_ms,
tpot_ms, itl_ms as {mean, median, p90, p99, count}; ttft_first_request_ms (a number) and
ttft_others_ms with --shared-doc, ttft_first_turns_ms and ttft_later_turns_ms with --turns, null
otherwise) and records, one per request sent: index (with --turns, conversation x T + turn - 1),
client, ok, error, error_detail, start_s (from the first request sent), prompt_tokens,
cached_tokens (null without it), output_tokens, output_tokens_source ("usage" or "chunks"),
text_chunks, ttft_s, latency_s, tpot_s, itl_s (the list of gaps), conversation and turn (from 1;
without --turns every request is its own conversation's turn 1). Throughputs are per second.

Exit status: 0 when every request succeeded, 3 when the report was printed but some requests
failed or were not sent, 1 when the run could not start (server unreachable, no model, the
deadline reached while preparing, ...), 2 on a bad command line.
"""
import argparse
import gzip
import http.client
import ipaddress
import json
import os
import random
import socket
import statistics
import sys
import threading
import time
import urllib.parse

PROG = "pig-bench-serve"
LICENSES_DIR = "/usr/share/common-licenses"
DEBIAN_FAQ = "/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz"
TOKENIZE_PIECE_CHARS = 200_000
CHARS_PER_TOKEN = 4  # without /tokenize: the usual rule of thumb for English text
HEAD_TOKENS = 32  # prompts must differ within their first HEAD_TOKENS tokens
MAX_LINE = 1 << 22  # an SSE line longer than 4 MiB is malformed, not a reason to exhaust memory
JOIN_GRACE_S = 5.0  # after the deadline, how long the report waits for threads to notice it
FIRST_FAILURES = 3
# The questions of --shared-doc and --turns: their first words (and letters) differ, so that
# prompts on one document part right after it.
QUESTIONS = ("What is this text about?", "Summarize it in one sentence.",
             "List three terms it uses.", "Name one obligation it states.",
             "Explain its last sentence simply.", "Give an example it applies to.",
             "Quote its most important phrase.", "Does it mention any dates?")


class SetupError(Exception):
    """The run cannot start: printed as one line, exit status 1."""


# ---------------------------------------------------------------------------- command line

def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expects a positive integer, got '{text}'")
    return value


def nonnegative_int(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expects an integer >= 0, got '{text}'")
    return value


def positive_seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expects a positive number of seconds, got '{text}'")
    return value


def json_object(text):
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expects a JSON object, got '{text}' ({e})")
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expects a JSON object, got '{text}'")
    return value


def is_loopback_host(host):
    """127.0.0.0/8, ::1 (or IPv4-mapped 127/8) or 'localhost' resolving to loopback only."""
    if host.lower() == "localhost":
        try:
            infos = socket.getaddrinfo("localhost", None)
        except OSError:
            return False
        return bool(infos) and all(is_loopback_host(info[4][0]) for info in infos)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: what it resolves to may change; the rule is about addresses
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_loopback


def parse_url(parser, url):
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http":
        parser.error(f"--url {url}: only http:// URLs are supported")
    try:
        host, port = parts.hostname, parts.port or 80
    except ValueError as e:  # a malformed port
        parser.error(f"--url {url}: {e}")
    if not host:
        parser.error(f"--url {url}: no host")
    if not is_loopback_host(host):
        parser.error(f"--url {url}: host '{host}' is not a loopback address (127.0.0.0/8, ::1, "
                     "localhost): pig's benchmarks talk only to loopback")
    if parts.query or parts.fragment:
        parser.error(f"--url {url}: a base URL takes no query or fragment")
    return host, port, parts.path.rstrip("/")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    server = parser.add_argument_group("server")
    server.add_argument("--url", default="http://127.0.0.1:8080",
                        help="the server's base URL, without /v1 (default: %(default)s); "
                             "loopback hosts only")
    server.add_argument("--api-key", metavar="KEY", help="sent as 'Authorization: Bearer KEY'")
    server.add_argument("--model", metavar="NAME",
                        help="the model field (default: the first id of GET /v1/models)")
    load = parser.add_argument_group("workload")
    load.add_argument("--clients", type=positive_int, default=1, metavar="N",
                      help="concurrent clients, each in a closed loop (default: %(default)s)")
    load.add_argument("--requests", type=positive_int, metavar="M",
                      help="requests in all (default: --clients, times --turns)")
    load.add_argument("--prompt-tokens", type=positive_int, default=1024, metavar="P",
                      help="prompt length in tokens (default: %(default)s); with "
                           "--shared-doc or --turns the document's, before its question")
    load.add_argument("--output-tokens", type=positive_int, default=128, metavar="O",
                      help="max_tokens of every request (default: %(default)s)")
    load.add_argument("--shared-doc", action="store_true",
                      help="every prompt is the same P-token document followed by a question of "
                           "its own (a prefix cache's workload)")
    load.add_argument("--turns", type=positive_int, default=1, metavar="T",
                      help="each client holds conversations of T turns: a turn's prompt is the "
                           "previous turn's prompt, its answer and a new question; a turn is one "
                           "request (default: %(default)s, no conversations)")
    load.add_argument("--ignore-eos", action="store_true",
                      help='send "ignore_eos": true (vLLM, llama-server) so that every request '
                           "generates O tokens")
    load.add_argument("--pig-json", type=json_object, metavar="JSON",
                      help='sent as the "pig" field, e.g. \'{"attention": "magicpig"}\'')
    load.add_argument("--extra-json", type=json_object, metavar="JSON",
                      help="members merged into the request body's top level, last")
    load.add_argument("--seed", type=nonnegative_int, default=0,
                      help="seed of the prompts' corpus offsets (default: %(default)s)")
    load.add_argument("--timeout", type=positive_seconds, default=1800.0, metavar="S",
                      help="the whole run's bound in seconds, preparation included "
                           "(default: %(default)s)")
    out = parser.add_argument_group("output")
    out.add_argument("--label", metavar="TEXT", default="",
                     help='a tag for the run, e.g. "magicpig 16k c=8"')
    out.add_argument("--json", metavar="FILE", help="write the figures and per-request records")
    args = parser.parse_args(argv)
    args.host, args.port, args.path_prefix = parse_url(parser, args.url)
    if args.shared_doc and args.turns > 1:
        parser.error("--shared-doc and --turns are separate workloads: give one of them")
    if args.requests is None:
        args.requests = args.clients * args.turns
    args.conversations = -(-args.requests // args.turns)  # the last one may have fewer turns
    return args


# ---------------------------------------------------------------------------- HTTP

class Server:
    """One loopback server: JSON calls for the preparation, bounded by the run's deadline."""

    def __init__(self, args, deadline):
        self.url = args.url
        self.host, self.port, self.prefix = args.host, args.port, args.path_prefix
        self.deadline = deadline
        self.headers = {"Content-Type": "application/json", "User-Agent": PROG}
        if args.api_key:
            self.headers["Authorization"] = f"Bearer {args.api_key}"

    def remaining(self):
        return self.deadline - time.perf_counter()

    def connect(self, timeout):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def call(self, method, path, body=None):
        """(status, decoded JSON or None). Connection errors are SetupErrors."""
        timeout = self.remaining()
        if timeout <= 0:
            raise SetupError(f"--timeout ran out while preparing the run ({method} {path})")
        conn = self.connect(timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            conn.request(method, self.prefix + path, body=payload, headers=self.headers)
            response = conn.getresponse()
            raw = response.read()
        except TimeoutError:
            raise SetupError(f"--timeout ran out while preparing the run ({method} {path})")
        except (OSError, http.client.HTTPException) as e:
            raise SetupError(f"cannot reach {self.url} ({method} {path}): {e}") from None
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = None
        return response.status, data


def choose_model(server, requested):
    status, data = server.call("GET", "/v1/models")
    ids = []
    if status == 200 and isinstance(data, dict) and isinstance(data.get("data"), list):
        ids = [m["id"] for m in data["data"]
               if isinstance(m, dict) and isinstance(m.get("id"), str)]
    if requested:
        if ids and requested not in ids:
            print(f"{PROG}: warning: --model {requested} is not among GET /v1/models' ids "
                  f"({', '.join(ids)})", file=sys.stderr)
        return requested
    if status != 200:
        raise SetupError(f"GET /v1/models answered HTTP {status}: name the model with --model")
    if not ids:
        raise SetupError("GET /v1/models lists no model: name it with --model")
    return ids[0]


# ---------------------------------------------------------------------------- prompts

def read_corpus():
    """Debian's texts, each file once (symlinks such as GPL -> GPL-3 resolved), each paragraph
    once: (text, the files used)."""
    files, seen_files = [], set()
    if os.path.isdir(LICENSES_DIR):
        for name in sorted(os.listdir(LICENSES_DIR)):
            path = os.path.realpath(os.path.join(LICENSES_DIR, name))
            if os.path.isfile(path) and path not in seen_files:
                seen_files.add(path)
                files.append(path)
    if os.path.isfile(DEBIAN_FAQ):
        files.append(DEBIAN_FAQ)
    if not files:
        raise SetupError(f"no corpus: neither {LICENSES_DIR} nor {DEBIAN_FAQ} exists "
                         "(packages base-files and debian-faq)")
    paragraphs, seen = [], set()
    for path in files:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for paragraph in f.read().split("\n\n"):
                key = " ".join(paragraph.split())
                if key and key not in seen:
                    seen.add(key)
                    paragraphs.append(paragraph.strip("\n"))
    return "\n\n".join(paragraphs) + "\n\n", files


def pieces(text, size):
    """text cut into pieces of at most ~size characters, each cut before a whitespace."""
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            end = cut if cut > start else end
        yield text[start:end]
        start = end


class Tokenizer:
    """POST /tokenize and /detokenize in whichever shape the server answers (module doc)."""

    SHAPES = ("content", "prompt")

    def __init__(self, server, model):
        self.server, self.model, self.shape, self.special = server, model, None, []

    def _tokenize_body(self, shape, text):
        if shape == "content":
            return {"content": text}
        return {"model": self.model, "prompt": text, "add_special_tokens": False}

    def _tokens(self, data):
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            return None
        # llama-server's with_pieces answers [{"id": ..., "piece": ...}]
        tokens = [t["id"] if isinstance(t, dict) else t for t in tokens]
        return tokens if all(isinstance(t, int) for t in tokens) else None

    def detect(self, probe):
        """The shape this server takes, or None with the reason."""
        reasons = []
        for shape in self.SHAPES:
            status, data = self.server.call("POST", "/tokenize", self._tokenize_body(shape, probe))
            tokens = self._tokens(data) if status == 200 else None
            if not tokens:
                reasons.append(f"{shape} shape: HTTP {status}")
                continue
            self.shape = shape
            if self.detokenize(tokens) is None:
                self.shape = None
                reasons.append(f"{shape} shape: /detokenize failed")
                continue
            # Tokens a tokenizer adds to every text (a BOS) are cut from each piece.
            status, data = self.server.call("POST", "/tokenize", self._tokenize_body(shape, ""))
            self.special = (self._tokens(data) or []) if status == 200 else []
            return None
        return "; ".join(reasons)

    def tokenize(self, text):
        status, data = self.server.call("POST", "/tokenize", self._tokenize_body(self.shape, text))
        tokens = self._tokens(data) if status == 200 else None
        if tokens is None:
            raise SetupError(f"POST /tokenize of a corpus piece answered HTTP {status}")
        n = len(self.special)
        return tokens[n:] if n and tokens[:n] == self.special else tokens

    def detokenize(self, tokens):
        body = {"tokens": tokens}
        if self.shape == "prompt":
            body["model"] = self.model
        status, data = self.server.call("POST", "/detokenize", body)
        if status != 200 or not isinstance(data, dict):
            return None
        text = data.get("content", data.get("prompt"))
        return text if isinstance(text, str) else None


def ring_window(seq, start, n):
    """n items of seq from start, wrapping around its end (as often as needed)."""
    out = seq[start:start + n]
    while len(out) < n:
        out = out + seq[:n - len(out)]
    return out


def draw_offsets(seq, count, length, head, rng):
    """count offsets into the ring seq whose windows differ in their first `head` items; False
    as the second value when the corpus was too small to keep them apart."""
    offsets, heads, apart = [], set(), True
    attempts, limit = 0, 20 * count + 100
    while len(offsets) < count:
        offset = rng.randrange(len(seq))
        key = tuple(ring_window(seq, offset, min(head, length)))
        attempts += 1
        if key in heads:
            if attempts < limit:
                continue
            apart = False
        heads.add(key)
        offsets.append(offset)
    return offsets, apart


def question(j, n):
    """The question after a document (or an answer): the j-th of QUESTIONS, cyclically, numbered
    n. It starts with a space and a word, which BPE and SentencePiece tokenizers join into one
    token, apart from what precedes it."""
    return f" {QUESTIONS[j % len(QUESTIONS)]} (question {n})\nAnswer:"


def make_prompts(server, model, args):
    """The prompts (with --turns, each conversation's first) and a description of how they were
    made (for the report and the JSON)."""
    count = 1 if args.shared_doc else args.conversations  # the corpus windows drawn
    corpus, files = read_corpus()
    info = {"corpus_files": files, "corpus_chars": len(corpus), "corpus_tokens": None,
            "method": None, "tokenize_shape": None, "offsets": None, "note": None}
    if DEBIAN_FAQ not in files:
        info["note"] = f"{DEBIAN_FAQ} is missing (package debian-faq): licenses only"
    rng = random.Random(args.seed)
    tokenizer = Tokenizer(server, model)
    why_not = tokenizer.detect("The quick brown fox jumps over the lazy dog.")
    if why_not is None:
        tokens = []
        for piece in pieces(corpus, TOKENIZE_PIECE_CHARS):
            tokens += tokenizer.tokenize(piece)
        if not tokens:
            raise SetupError("POST /tokenize returned no tokens for the corpus")
        offsets, apart = draw_offsets(tokens, count, args.prompt_tokens, HEAD_TOKENS, rng)
        prompts = []
        for offset in offsets:
            text = tokenizer.detokenize(ring_window(tokens, offset, args.prompt_tokens))
            if text is None:
                raise SetupError("POST /detokenize of a prompt window failed")
            prompts.append(text)
        info.update(method="tokenize", tokenize_shape=tokenizer.shape, corpus_tokens=len(tokens))
        unit = "tokens"
    else:
        chars = CHARS_PER_TOKEN * args.prompt_tokens
        offsets, apart = draw_offsets(corpus, count, chars, CHARS_PER_TOKEN * HEAD_TOKENS, rng)
        prompts = [ring_window(corpus, offset, chars) for offset in offsets]
        info.update(method="chars", why_not_tokenize=why_not)
        unit = "characters"
    info["offsets"] = offsets
    if not apart:
        what = "prompts" if args.turns == 1 else "conversations"
        print(f"{PROG}: warning: the corpus is too small to give {count} {what} distinct "
              f"first {HEAD_TOKENS} {unit}: some prompts share a prefix", file=sys.stderr)
    if args.shared_doc:
        prompts = [prompts[0] + question(i, i + 1) for i in range(args.requests)]
    elif args.turns > 1:
        prompts = [document + question(0, 1) for document in prompts]
    return prompts, info


# ---------------------------------------------------------------------------- one request

class Deadline(Exception):
    pass


class Failure(Exception):
    """reason: a short category the report counts; detail: what exactly happened."""

    def __init__(self, reason, detail=""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail or reason


def sse_events(response, sock, deadline):
    """(time, data) for every event of an SSE stream, read line by line, each read bounded by
    the deadline; ends at the end of the stream (an unfinished last event is dropped, as the
    specification says)."""
    data = []
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            raise Deadline()
        sock.settimeout(remaining)
        raw = response.readline(MAX_LINE)
        if not raw:
            return
        if len(raw) == MAX_LINE and not raw.endswith(b"\n"):
            raise Failure("malformed event", f"an SSE line longer than {MAX_LINE} bytes")
        if raw.endswith(b"\r\n"):
            raw = raw[:-2]
        elif raw.endswith(b"\n"):
            raw = raw[:-1]
        for line in raw.split(b"\r"):  # a lone \r also ends a line
            if not line:
                if data:
                    yield time.perf_counter(), "\n".join(data)
                    data = []
                continue
            text = line.decode("utf-8", errors="replace")
            if text.startswith(":"):
                continue
            field, _, value = text.partition(":")
            if field == "data":
                data.append(value[1:] if value.startswith(" ") else value)


def run_request(server, body, deadline, record):
    """Sends one streaming completion and fills record; never raises."""
    chunk_times, texts, usage = [], [], None
    t0 = time.perf_counter()
    record["start"] = t0
    conn = None
    try:
        remaining = deadline - t0
        if remaining <= 0:
            raise Deadline()
        conn = server.connect(remaining)
        conn.connect()
        sock = conn.sock  # the response keeps using it after conn lets go of it
        headers = dict(server.headers, Accept="text/event-stream")
        conn.request("POST", server.prefix + "/v1/completions", body=body, headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            text = response.read(300).decode("utf-8", errors="replace").strip()
            raise Failure(f"HTTP {response.status}", f"HTTP {response.status}: {text}")
        done = False
        for stamp, data in sse_events(response, sock, deadline):
            if data.strip() == "[DONE]":
                done = True
                record["end"] = stamp
                break
            try:
                event = json.loads(data)
            except ValueError:
                raise Failure("malformed event", f"malformed event: {data[:80]!r}") from None
            if not isinstance(event, dict):
                raise Failure("malformed event", f"malformed event: {data[:80]!r}")
            if event.get("error"):
                raise Failure("error event", f"error event: {json.dumps(event['error'])[:200]}")
            choices = event.get("choices") or []
            if any(isinstance(c, dict) and c.get("text") for c in choices):
                chunk_times.append(stamp)
                texts += [c["text"] for c in choices
                          if isinstance(c, dict) and isinstance(c.get("text"), str)]
            if isinstance(event.get("usage"), dict):
                usage = event["usage"]
        if not done:
            raise Failure("stream ended without [DONE]")
        record["ok"] = True
    except Failure as e:
        record["error"], record["error_detail"] = e.reason, e.detail
    except (Deadline, socket.timeout, TimeoutError):
        record["error"] = record["error_detail"] = "deadline"
    except http.client.IncompleteRead as e:
        record["error"] = "stream ended without [DONE]"
        record["error_detail"] = f"stream cut: {e!r}"
    except (OSError, http.client.HTTPException) as e:
        record["error"] = type(e).__name__
        record["error_detail"] = f"{type(e).__name__}: {e}"
    except Exception as e:  # a bug in a server's answer must not end the run
        record["error"] = type(e).__name__
        record["error_detail"] = f"{type(e).__name__}: {e}"
    finally:
        if conn is not None:
            conn.close()
    record.setdefault("end", time.perf_counter())
    record["chunk_times"] = chunk_times
    record["text"] = "".join(texts)  # the answer, which --turns' next turn sends back
    if usage is not None:
        if isinstance(usage.get("prompt_tokens"), int):
            record["prompt_tokens"] = usage["prompt_tokens"]
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and type(details.get("cached_tokens")) is int:
            record["cached_tokens"] = details["cached_tokens"]
        if isinstance(usage.get("completion_tokens"), int):
            record["output_tokens"] = usage["completion_tokens"]
            record["output_tokens_source"] = "usage"
    if "output_tokens" not in record:
        record["output_tokens"] = len(chunk_times)
        record["output_tokens_source"] = "chunks"


# ---------------------------------------------------------------------------- the load

def run_load(server, conversations, clients, deadline, build):
    """Closed loop: each client sends its next request when its previous one has finished.
    conversations: one per conversation (without --turns, per request), {"index": its first
    request's index, "turns", "prompt": its first prompt, "body": that prompt's body}; turn k > 1
    sends build(the previous prompt + its answer + question k). Returns (records, t_start,
    dropped): records[i] is None for a request never sent, dropped counts the turns not sent
    because an earlier turn of theirs failed (not at the deadline)."""
    records = [None] * sum(c["turns"] for c in conversations)
    lock = threading.Lock()
    state = {"next": 0, "stopped": False, "dropped": 0}

    def client(cid):
        while True:
            with lock:
                c = state["next"]
                if c >= len(conversations) or time.perf_counter() >= deadline:
                    return
                state["next"] = c + 1
            conversation = conversations[c]
            prompt, body = conversation["prompt"], conversation["body"]
            for turn in range(1, conversation["turns"] + 1):
                i = conversation["index"] + turn - 1
                if turn > 1:
                    prompt = prompt + records[i - 1]["text"] + question(turn - 1, turn)
                    body = build(prompt)
                record = {"index": i, "client": cid, "ok": False, "conversation": c, "turn": turn}
                with lock:
                    if state["stopped"] or (turn > 1 and time.perf_counter() >= deadline):
                        return
                    records[i] = record
                run_request(server, body, deadline, record)
                record["finished"] = True
                if not record["ok"]:
                    if record["error"] != "deadline":
                        with lock:
                            state["dropped"] += conversation["turns"] - turn
                    break

    t_start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    reason = "deadline"
    try:
        for t in threads:
            t.join(max(0.0, deadline - time.perf_counter()) + JOIN_GRACE_S)
    except KeyboardInterrupt:
        reason = "interrupted"
        print(f"{PROG}: interrupted: reporting what finished", file=sys.stderr)
    with lock:
        # Nothing more is sent, whatever the threads still do.
        state["next"], state["stopped"] = len(conversations), True
        records, dropped = list(records), state["dropped"]
    snapshot = []
    for record in records:
        if record is not None and not record.get("finished"):
            # Still running past the deadline's grace, or interrupted: abandoned (its thread is a
            # daemon and may still write to the original record, not to this copy).
            record = {"index": record["index"], "client": record["client"], "ok": False,
                      "conversation": record["conversation"], "turn": record["turn"],
                      "error": reason, "error_detail": f"{reason} (abandoned)",
                      "start": record.get("start", t_start),
                      "end": min(time.perf_counter(), deadline),
                      "chunk_times": [], "output_tokens": 0, "output_tokens_source": "chunks"}
        snapshot.append(record)
    return snapshot, t_start, dropped


# ---------------------------------------------------------------------------- statistics

def percentile(values, q):
    """numpy's default method ('linear', Hyndman and Fan's type 7): the sorted sample's value at
    rank (n - 1) * q / 100, interpolated linearly between the two values around it."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def summary_ms(values_s):
    if not values_s:
        return None
    ms = [v * 1000.0 for v in values_s]
    return {"mean": statistics.fmean(ms), "median": statistics.median(ms),
            "p90": percentile(ms, 90), "p99": percentile(ms, 99), "count": len(ms)}


def per_request(record, t_start):
    """The JSON record of one request: times in seconds, relative to the load's start."""
    times = record.get("chunk_times", [])
    start = record.get("start")
    ttft = times[0] - start if times else None
    latency = record["end"] - start if start is not None else None
    out = {"index": record["index"], "client": record["client"], "ok": record["ok"],
           "error": record.get("error"), "error_detail": record.get("error_detail"),
           "start_s": None if start is None else start - t_start,
           "prompt_tokens": record.get("prompt_tokens"),
           "cached_tokens": record.get("cached_tokens"),
           "output_tokens": record.get("output_tokens"),
           "output_tokens_source": record.get("output_tokens_source"),
           "text_chunks": len(times), "ttft_s": ttft, "latency_s": latency,
           "tpot_s": None, "itl_s": [b - a for a, b in zip(times, times[1:])],
           "conversation": record["conversation"], "turn": record["turn"]}
    if record["ok"] and ttft is not None and (out["output_tokens"] or 0) > 1:
        out["tpot_s"] = (latency - ttft) / (out["output_tokens"] - 1)
    return out


def summarize(records, t_start, args, dropped):
    sent = [r for r in records if r is not None]
    rows = [per_request(r, t_start) for r in sent]
    ok = [row for row, r in zip(rows, sent) if r["ok"]]
    reasons = {}
    for row in rows:
        if not row["ok"]:
            reasons[row["error"]] = reasons.get(row["error"], 0) + 1
    ends = [r["end"] for r in sent]
    duration = (max(ends) - t_start) if ends else 0.0
    input_known = [row["prompt_tokens"] for row in ok if row["prompt_tokens"] is not None]
    total_in = sum(input_known)
    total_out = sum(row["output_tokens"] for row in ok)
    firsts = [r["chunk_times"][0] for r in sent if r["ok"] and r["chunk_times"]]
    lasts = [r["chunk_times"][-1] for r in sent if r["ok"] and r["chunk_times"]]
    decode_span = (max(lasts) - min(firsts)) if firsts else 0.0
    # Steady state: from the last request's first token to the first request's last token, every
    # request is decoding (meaningful when all requests run at once: --requests = --clients).
    steady_span, steady_chunks = 0.0, 0
    if len(firsts) == len(sent) and len(firsts) > 0 and max(firsts) < min(lasts):
        lo, hi = max(firsts), min(lasts)
        steady_span = hi - lo
        steady_chunks = sum(1 for r in sent for t in r["chunk_times"] if lo < t <= hi)

    def rate(x, span):
        return x / span if span > 0 else None

    cached = [row for row in ok if row["cached_tokens"] is not None]
    ttft_first = ttft_others = ttft_first_turns = ttft_later_turns = None
    if args.shared_doc and rows:
        first = min(rows, key=lambda row: row["start_s"])  # the first sent prefills the document
        if first["ok"] and first["ttft_s"] is not None:
            ttft_first = first["ttft_s"] * 1000.0
        ttft_others = summary_ms([row["ttft_s"] for row in ok
                                  if row is not first and row["ttft_s"] is not None])
    if args.turns > 1:
        ttft_first_turns = summary_ms([row["ttft_s"] for row in ok
                                       if row["turn"] == 1 and row["ttft_s"] is not None])
        ttft_later_turns = summary_ms([row["ttft_s"] for row in ok
                                       if row["turn"] > 1 and row["ttft_s"] is not None])
    return {
        "completed": len(ok), "failed": len(rows) - len(ok),
        "not_sent": len(records) - len(sent), "not_sent_after_failed_turn": dropped,
        "failure_reasons": reasons,
        "first_failures": [row["error_detail"] for row in rows if not row["ok"]][:FIRST_FAILURES],
        "duration_s": duration,
        "total_input_tokens": total_in,
        "mean_prompt_tokens": statistics.fmean(input_known) if input_known else None,
        "requests_without_prompt_usage": len(ok) - len(input_known),
        "total_output_tokens": total_out,
        "mean_output_tokens": statistics.fmean([r["output_tokens"] for r in ok]) if ok else None,
        "output_tokens_from_chunks": sum(1 for r in ok if r["output_tokens_source"] == "chunks"),
        "request_throughput": rate(len(ok), duration),
        "output_throughput": rate(total_out, duration),
        "total_token_throughput": rate(total_in + total_out, duration),
        "decode_span_s": decode_span,
        "decode_output_throughput": rate(total_out, decode_span),
        "steady_span_s": steady_span,
        "steady_output_throughput": rate(steady_chunks, steady_span),
        "ttft_ms": summary_ms([r["ttft_s"] for r in ok if r["ttft_s"] is not None]),
        "tpot_ms": summary_ms([r["tpot_s"] for r in ok if r["tpot_s"] is not None]),
        "itl_ms": summary_ms([gap for r in ok for gap in r["itl_s"]]),
        "cached_prompt_tokens": sum(row["cached_tokens"] for row in cached) if cached else None,
        "cached_usage_prompt_tokens": (sum(row["prompt_tokens"] or 0 for row in cached)
                                       if cached else None),
        "cached_usage_requests": len(cached),
        "mean_cached_tokens": (statistics.fmean([row["cached_tokens"] for row in cached])
                               if cached else None),
        "ttft_first_request_ms": ttft_first, "ttft_others_ms": ttft_others,
        "ttft_first_turns_ms": ttft_first_turns, "ttft_later_turns_ms": ttft_later_turns,
    }, rows


# ---------------------------------------------------------------------------- report

def fmt(value, digits=2):
    if value is None:
        return "n/a"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def print_report(args, model, info, result):
    width = 50

    def line(name, value):
        print(f"{name + ':':<41}{value}")

    title = f" {PROG}{': ' + args.label if args.label else ''} "
    print(title.center(width, "="))
    line("Server", f"{args.url} (model {model})")
    workload = (f"{args.clients} clients, {args.requests} requests, {args.prompt_tokens} "
                f"prompt tokens, max_tokens {args.output_tokens}")
    if args.ignore_eos:
        workload += ", ignore_eos"
    if args.shared_doc:
        workload += ", one shared document"
    if args.turns > 1:
        workload += f", {args.conversations} conversations of {args.turns} turns"
    line("Workload", workload)
    if args.pig_json:
        line("pig", json.dumps(args.pig_json))
    if info["method"] == "tokenize":
        windows = f"{args.prompt_tokens}-token window" + ("" if args.shared_doc else "s")
        if args.shared_doc:
            windows = "one shared " + windows
        prompts = (f"{windows} (/tokenize, {info['tokenize_shape']} shape) of a "
                   f"{info['corpus_tokens']}-token corpus")
    else:
        chars = CHARS_PER_TOKEN * args.prompt_tokens
        each = "in one shared document" if args.shared_doc else "each"
        prompts = (f"~{CHARS_PER_TOKEN} characters per token: {chars} characters {each} "
                   f"(no /tokenize: {info['why_not_tokenize']})")
    if args.shared_doc:
        prompts += ", then a question per request"
    elif args.turns > 1:
        prompts += ", then a question; a later turn adds the answer and a question"
    line("Prompts", prompts)
    if info["note"]:
        line("Corpus", info["note"])
    line("Successful requests", result["completed"])
    line("Failed requests", result["failed"])
    if result["not_sent"] - result["not_sent_after_failed_turn"]:
        line("Requests not sent (deadline)",
             result["not_sent"] - result["not_sent_after_failed_turn"])
    if result["not_sent_after_failed_turn"]:
        line("Requests not sent (a turn failed)", result["not_sent_after_failed_turn"])
    if result["failure_reasons"]:
        line("Failure reasons", "; ".join(f"{k} x{v}" for k, v in
                                          sorted(result["failure_reasons"].items())))
        for detail in result["first_failures"]:
            line("  failure", detail)
    line("Benchmark duration (s)", fmt(result["duration_s"]))
    line("Total input tokens", result["total_input_tokens"])
    line("Mean prompt tokens (usage)", fmt(result["mean_prompt_tokens"], 1))
    if result["requests_without_prompt_usage"]:
        line("  without usage.prompt_tokens", result["requests_without_prompt_usage"])
    if result["cached_prompt_tokens"] is not None:
        x, y = result["cached_prompt_tokens"], result["cached_usage_prompt_tokens"]
        share = f" ({100.0 * x / y:.1f}%)" if y else ""
        line("Cached prompt tokens (usage)", f"{x} of {y}{share}")
        line("Mean cached tokens per request", fmt(result["mean_cached_tokens"], 1))
        if result["cached_usage_requests"] < result["completed"]:
            line("  without cached_tokens", result["completed"] - result["cached_usage_requests"])
    line("Total generated tokens", result["total_output_tokens"])
    line("Mean output tokens", fmt(result["mean_output_tokens"], 1))
    if result["output_tokens_from_chunks"]:
        line("  counted as text chunks (no usage)", result["output_tokens_from_chunks"])
    line("Request throughput (req/s)", fmt(result["request_throughput"]))
    line("Output token throughput (tok/s)", fmt(result["output_throughput"]))
    line("Total token throughput (tok/s)", fmt(result["total_token_throughput"]))
    line("Decode-phase output tok/s", fmt(result["decode_output_throughput"]))
    line("Steady output tok/s (all decoding)", fmt(result["steady_output_throughput"]))
    for key, name, heading in (("ttft_ms", "TTFT", "Time to First Token"),
                               ("tpot_ms", "TPOT", "Time per Output Token (excl. 1st token)"),
                               ("itl_ms", "ITL", "Inter-token Latency")):
        print(f" {heading} ".center(width, "-"))
        stats = result[key] or {}
        for stat, label in (("mean", "Mean"), ("median", "Median"), ("p90", "P90"),
                            ("p99", "P99")):
            line(f"{label} {name} (ms)", fmt(stats.get(stat)))
        if key == "ttft_ms" and args.shared_doc:
            line("TTFT of the first request (ms)", fmt(result["ttft_first_request_ms"]))
            line("Mean TTFT of the others (ms)", fmt((result["ttft_others_ms"] or {}).get("mean")))
        if key == "ttft_ms" and args.turns > 1:
            for which, name in (("first", "first turns"), ("later", "later turns")):
                stats = result[f"ttft_{which}_turns_ms"] or {}
                line(f"Mean TTFT, {name} (ms)", fmt(stats.get("mean")))
                line(f"Median TTFT, {name} (ms)", fmt(stats.get("median")))
    print("=" * width)
    sys.stdout.flush()


def write_json(path, args, model, info, result, rows):
    document = {
        "label": args.label, "url": args.url, "model": model,
        "clients": args.clients, "requests": args.requests,
        "prompt_tokens_requested": args.prompt_tokens,
        "output_tokens_requested": args.output_tokens, "ignore_eos": args.ignore_eos,
        "pig": args.pig_json, "extra": args.extra_json, "seed": args.seed,
        "timeout_s": args.timeout, "shared_doc": args.shared_doc, "turns": args.turns,
        "conversations": args.conversations, "prompts": info,
        **result,
        "records": rows,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------- main

def request_body(args, model, prompt):
    body = {"model": model, "prompt": prompt, "max_tokens": args.output_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.pig_json is not None:
        body["pig"] = args.pig_json
    body.update(args.extra_json or {})
    return json.dumps(body).encode()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    deadline = time.perf_counter() + args.timeout
    server = Server(args, deadline)
    try:
        model = choose_model(server, args.model)
        prompts, info = make_prompts(server, model, args)
    except SetupError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted while preparing", file=sys.stderr)
        return 1
    conversations = [{"index": c * args.turns,
                      "turns": min(args.turns, args.requests - c * args.turns),
                      "prompt": p, "body": request_body(args, model, p)}
                     for c, p in enumerate(prompts)]
    records, t_start, dropped = run_load(server, conversations, args.clients, deadline,
                                         lambda prompt: request_body(args, model, prompt))
    result, rows = summarize(records, t_start, args, dropped)
    result["deadline_s"] = deadline - t_start
    print_report(args, model, info, result)
    if args.json:
        try:
            write_json(args.json, args, model, info, result, rows)
        except OSError as e:
            print(f"{PROG}: error: --json {args.json}: {e}", file=sys.stderr)
            return 1
    return 0 if result["completed"] == args.requests else 3


if __name__ == "__main__":
    sys.exit(main())
