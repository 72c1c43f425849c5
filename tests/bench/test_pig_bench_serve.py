"""pig-bench-serve (bench/pig_bench_serve.py) against fake_openai_server.py on loopback.

Every run is a subprocess bounded by RUN_TIMEOUT_S; every server a subprocess killed at the end
of its test (and gone by itself after its --lifetime).
"""
import importlib.util
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BENCH = os.path.join(ROOT, "bench", "pig_bench_serve.py")
FAKE = os.path.join(HERE, "fake_openai_server.py")
RUN_TIMEOUT_S = 90  # a bound on a hang, not a speed target: a parallel build slows the run


class FakeServer:
    def __init__(self, *options):
        self.process = subprocess.Popen(
            [sys.executable, FAKE, "--lifetime", "90", *options], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()  # the server's first line, or "" if it died
        assert "listening on http://127.0.0.1:" in line, self.process.stderr.read()
        self.url = line.split("listening on ", 1)[1].strip()

    def log(self):
        import urllib.request
        with urllib.request.urlopen(self.url + "/debug/requests", timeout=10) as response:
            return json.load(response)

    def stop(self):
        self.process.kill()
        self.process.wait(10)
        self.process.stdout.close()
        self.process.stderr.close()


@pytest.fixture
def fake():
    servers = []

    def start(*options):
        servers.append(FakeServer(*options))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def bench(*args):
    return subprocess.run([sys.executable, BENCH, *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)


def run_json(tmp_path, *args):
    out = tmp_path / "run.json"
    result = bench(*args, "--json", str(out))
    assert "Traceback" not in result.stderr, result.stderr
    return result, json.loads(out.read_text())


def load_bench_module():
    spec = importlib.util.spec_from_file_location("pig_bench_serve", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The timing test's server: F before the first token, D between tokens.
F, D = 0.3, 0.04
# Bounds. Lower: the server sends its headers at once and sleeps F before the first token, and
# the client's clock starts before it sends, so every TTFT is >= F; a request's text chunks are
# sent >= 11 D apart in all, so its gaps sum to >= 11 D less its first chunk's delay in arriving
# (TTFT - F). Neither needs slack. Upper: the loopback round trip, HTTP and one event's JSON cost
# ~1 ms on an idle 2-core machine (measured: median TTFT F + 3 ms, median ITL D + 0.3 ms); the
# slacks below allow 20-30 times that, for a machine shared with a parallel build. A TTFT stamped
# at the response headers (~0) or at [DONE] (F + 11 D) falls outside; a miscounted chunk (the
# keep-alive comment, the final empty-text chunk, the usage chunk) fails the exact counts.
TTFT_SLACK_S = 0.1
ITL_SLACK_S = 0.02


def test_counts_timings_and_the_closed_loop(fake, tmp_path):
    server = fake("--first-token-delay", str(F), "--token-delay", str(D), "--eos-after", "5")
    result, run = run_json(tmp_path, "--url", server.url, "--clients", "4", "--requests", "10",
                           "--prompt-tokens", "300", "--output-tokens", "12", "--ignore-eos",
                           "--label", "fake c=4")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "pig-bench-serve: fake c=4" in out
    assert "Successful requests:                     10\n" in out
    assert "Failed requests:                         0\n" in out
    assert "300-token windows (/tokenize, content shape)" in out
    assert (run["completed"], run["failed"], run["not_sent"]) == (10, 0, 0)
    assert run["model"] == "fake-model-a"  # the first id of /v1/models
    assert run["total_input_tokens"] == 3000 and run["mean_prompt_tokens"] == 300
    assert run["total_output_tokens"] == 120 and run["mean_output_tokens"] == 12
    records = run["records"]
    assert sorted(r["index"] for r in records) == list(range(10))
    for r in records:
        assert r["ok"] and r["error"] is None
        assert (r["prompt_tokens"], r["output_tokens"], r["output_tokens_source"]) == \
            (300, 12, "usage")
        assert r["text_chunks"] == 12 and len(r["itl_s"]) == 11, r
        assert F <= r["ttft_s"] < r["latency_s"], r
        # First chunk + the gaps = the last chunk, which comes before [DONE] (a TTFT taken at a
        # later chunk breaks this by ~D).
        assert r["ttft_s"] + sum(r["itl_s"]) <= r["latency_s"] + 1e-9, r
        assert r["tpot_s"] == pytest.approx((r["latency_s"] - r["ttft_s"]) / 11)
        assert sum(r["itl_s"]) >= 11 * D - (r["ttft_s"] - F) - 1e-3, r
    ttft = [r["ttft_s"] for r in records]
    itl = [gap for r in records for gap in r["itl_s"]]
    assert statistics.median(ttft) <= F + TTFT_SLACK_S, ttft
    assert D - ITL_SLACK_S <= statistics.median(itl) <= D + ITL_SLACK_S, itl
    assert D - ITL_SLACK_S <= run["tpot_ms"]["median"] / 1000 <= D + ITL_SLACK_S, run["tpot_ms"]
    assert run["ttft_ms"]["median"] == pytest.approx(statistics.median(ttft) * 1000)
    assert run["itl_ms"]["count"] == 110
    # Closed loop: 10 requests on 4 clients is 3 rounds for some client, each >= F + 11 D; an
    # open loop (all sent at once) would take one round.
    assert run["duration_s"] >= 3 * (F + 11 * D)
    assert run["request_throughput"] == pytest.approx(10 / run["duration_s"])
    assert run["output_throughput"] == pytest.approx(120 / run["duration_s"])
    assert run["decode_output_throughput"] > run["output_throughput"]
    log = server.log()
    assert log["max_in_flight"] == 4
    bodies = log["requests"]
    assert len(bodies) == 10
    for body in bodies:
        assert body["prompt_len"] == 300 and body["max_tokens"] == 12
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert body["temperature"] == 0 and body["ignore_eos"] is True
        assert body["model"] == "fake-model-a" and "pig" not in body
    # Distinct windows: no two prompts share their first 32 tokens (characters here).
    assert len({body["prompt_head"][:32] for body in bodies}) == 10
    # This server sends no usage.prompt_tokens_details: no cached figures, no line for them.
    assert "Cached prompt tokens" not in out and run["cached_prompt_tokens"] is None
    assert run["cached_usage_requests"] == 0 and all(r["cached_tokens"] is None for r in records)
    assert (run["shared_doc"], run["turns"], run["conversations"]) == (False, 1, 10)
    assert run["ttft_first_request_ms"] is None and run["ttft_first_turns_ms"] is None
    assert "TTFT of the first request" not in out and "first turns" not in out


def test_steady_throughput_counts_only_while_every_request_decodes(fake, tmp_path):
    # 4 requests at once, each F then 20 tokens D apart: while all decode, 4 tokens per D. A
    # closed loop with more requests than clients has no such window (reported as n/a).
    server = fake("--first-token-delay", str(F), "--token-delay", str(D))
    result, run = run_json(tmp_path, "--url", server.url, "--clients", "4", "--requests", "4",
                           "--prompt-tokens", "50", "--output-tokens", "20", "--ignore-eos")
    assert result.returncode == 0, result.stdout + result.stderr
    assert run["steady_span_s"] > 10 * D
    # 4 / D, within the ITL slack on each gap.
    assert 4 / (D + ITL_SLACK_S) <= run["steady_output_throughput"] <= 4 / (D - ITL_SLACK_S), run
    _, looped = run_json(tmp_path, "--url", server.url, "--clients", "2", "--requests", "4",
                         "--prompt-tokens", "50", "--output-tokens", "5", "--ignore-eos")
    assert looped["steady_output_throughput"] is None and looped["steady_span_s"] == 0


def test_fields_sent_and_eos(fake, tmp_path):
    server = fake("--eos-after", "5")
    result, run = run_json(tmp_path, "--url", server.url + "/", "--model", "fake-model-b",
                           "--api-key", "sekrit", "--clients", "2", "--requests", "3",
                           "--prompt-tokens", "64", "--output-tokens", "9",
                           "--pig-json", '{"attention": "magicpig", "lsh": {"K": 10}}',
                           "--extra-json", '{"top_k": 1, "temperature": 0.5}')
    assert result.returncode == 0, result.stdout + result.stderr
    assert run["completed"] == 3 and run["total_output_tokens"] == 15  # EOS after 5, not 9
    for body in server.log()["requests"]:
        assert body["model"] == "fake-model-b"
        assert body["authorization"] == "Bearer sekrit"
        assert body["pig"] == {"attention": "magicpig", "lsh": {"K": 10}}
        assert body["top_k"] == 1 and body["temperature"] == 0.5  # --extra-json merged last
        assert "ignore_eos" not in body


def test_failures_are_counted_not_fatal(fake, tmp_path):
    # Arrival n: 503 when n % 4 == 0, cut when n % 5 == 0, malformed when n % 7 == 0 (first
    # match): of 1..14, 503 at 4, 8, 12; cut at 5, 10; malformed at 7, 14.
    server = fake("--fail-every", "4", "--cut-every", "5", "--malformed-every", "7",
                  "--token-delay", "0.005", "--crlf")
    result, run = run_json(tmp_path, "--url", server.url, "--clients", "3", "--requests", "14",
                           "--prompt-tokens", "100", "--output-tokens", "6")
    assert result.returncode == 3, result.stdout + result.stderr
    assert (run["completed"], run["failed"], run["not_sent"]) == (7, 7, 0)
    assert run["failure_reasons"] == {"HTTP 503": 3, "stream ended without [DONE]": 2,
                                      "malformed event": 2}
    assert "Failed requests:                         7\n" in result.stdout
    assert "HTTP 503 x3; malformed event x2; stream ended without [DONE] x2" in result.stdout
    assert "failure:" in result.stdout and "overloaded (fake)" in result.stdout
    assert len(run["first_failures"]) == 3
    assert run["total_output_tokens"] == 7 * 6  # successful requests only
    for r in run["records"]:
        assert r["ok"] == (r["error"] is None)
        if r["ok"]:
            assert r["text_chunks"] == 6 and len(r["itl_s"]) == 5  # CRLF lines parsed


def test_without_usage_output_tokens_are_chunks(fake, tmp_path):
    server = fake("--no-usage")
    result, run = run_json(tmp_path, "--url", server.url, "--requests", "2",
                           "--prompt-tokens", "50", "--output-tokens", "7")
    assert result.returncode == 0, result.stdout + result.stderr
    assert run["total_output_tokens"] == 14 and run["mean_prompt_tokens"] is None
    assert all(r["output_tokens_source"] == "chunks" for r in run["records"])
    assert "counted as text chunks (no usage):     2" in result.stdout


def test_vllm_tokenize_shape(fake, tmp_path):
    server = fake("--tokenize", "prompt")
    result, run = run_json(tmp_path, "--url", server.url, "--requests", "3",
                           "--prompt-tokens", "200", "--output-tokens", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert run["prompts"]["tokenize_shape"] == "prompt"
    assert run["mean_prompt_tokens"] == 200


def test_without_tokenize_four_characters_per_token(fake, tmp_path):
    server = fake("--tokenize", "none")
    result, run = run_json(tmp_path, "--url", server.url, "--requests", "3", "--seed", "7",
                           "--prompt-tokens", "100", "--output-tokens", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "~4 characters per token: 400 characters each (no /tokenize" in result.stdout
    assert run["prompts"]["method"] == "chars"
    assert run["mean_prompt_tokens"] == 400  # the fake counts characters


def test_same_seed_same_prompts(fake, tmp_path):
    server = fake()
    runs = [run_json(tmp_path, "--url", server.url, "--requests", "4", "--seed", str(seed),
                     "--prompt-tokens", "80", "--output-tokens", "1")[1] for seed in (3, 3, 4)]
    offsets = [run["prompts"]["offsets"] for run in runs]
    assert offsets[0] == offsets[1] != offsets[2]
    heads = [body["prompt_head"] for body in server.log()["requests"]]
    assert sorted(heads[:4]) == sorted(heads[4:8]) and set(heads[:4]) != set(heads[8:])


def cached_line(x, y):
    return f"Cached prompt tokens (usage):            {x} of {y} ({100.0 * x / y:.1f}%)\n"


def test_cached_tokens_are_reported(fake, tmp_path):
    # The fake reports as cached the longest prefix it has seen before: the same seed twice sends
    # the same prompts, whose heads differ from each other (less than 32 cached the first time)
    # and are all cached the second time.
    server = fake("--report-cached")
    args = ("--url", server.url, "--clients", "2", "--requests", "4", "--prompt-tokens", "90",
            "--output-tokens", "2")
    result, first = run_json(tmp_path, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(r["cached_tokens"] < 32 for r in first["records"])
    assert first["cached_usage_requests"] == 4 and first["cached_usage_prompt_tokens"] == 360
    result, again = run_json(tmp_path, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [r["cached_tokens"] for r in again["records"]] == [90] * 4
    assert (again["cached_prompt_tokens"], again["cached_usage_prompt_tokens"]) == (360, 360)
    assert again["mean_cached_tokens"] == 90
    assert cached_line(360, 360) in result.stdout
    assert "Mean cached tokens per request:          90.0\n" in result.stdout
    # What the fake computed is what the records say, request by request.
    logged = [body["cached_tokens"] for body in server.log()["requests"]]
    assert sorted(logged) == sorted(r["cached_tokens"] for r in first["records"] + again["records"])


def test_shared_doc(fake, tmp_path):
    P = 120
    server = fake("--report-cached", "--token-delay", "0.005")
    result, run = run_json(tmp_path, "--url", server.url, "--clients", "3", "--requests", "8",
                           "--prompt-tokens", str(P), "--output-tokens", "3", "--seed", "5",
                           "--shared-doc")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "3 clients, 8 requests, 120 prompt tokens, max_tokens 3, one shared document" in out
    assert "one shared 120-token window (/tokenize, content shape)" in out
    assert run["shared_doc"] is True and len(run["prompts"]["offsets"]) == 1
    prompts = [body["prompt"] for body in server.log()["requests"]]
    assert len(prompts) == 8
    # One document of P tokens (characters here) for all, then a question of each one's own:
    # the questions start with a space and 8 different words.
    assert len({p[:P] for p in prompts}) == 1
    assert len({p[P:] for p in prompts}) == 8 and len({p[P:P + 2] for p in prompts}) == 8
    question = load_bench_module().question
    assert sorted(p[P:] for p in prompts) == sorted(question(i, i + 1) for i in range(8))
    # The fake caches the document and the space after it: 0 for the first arrival, P + 1 for
    # the 7 others.
    records = run["records"]
    assert sorted(r["cached_tokens"] for r in records) == [0] + [P + 1] * 7
    total = sum(len(p) for p in prompts)
    assert (run["cached_prompt_tokens"], run["total_input_tokens"]) == (7 * (P + 1), total)
    assert cached_line(7 * (P + 1), total) in out
    # The first request sent against the others.
    first = min(records, key=lambda r: r["start_s"])
    assert run["ttft_first_request_ms"] == pytest.approx(first["ttft_s"] * 1000)
    others = [r["ttft_s"] * 1000 for r in records if r is not first]
    assert run["ttft_others_ms"]["count"] == 7
    assert run["ttft_others_ms"]["mean"] == pytest.approx(statistics.fmean(others))
    assert "TTFT of the first request (ms):" in out and "Mean TTFT of the others (ms):" in out
    assert run["ttft_first_turns_ms"] is None and "first turns" not in out


def test_turns(fake, tmp_path):
    # 5 requests of 3 turns: conversations of 3 and 2 turns. The fake answers " t0 t1 t2 t3".
    P, answer = 80, " t0 t1 t2 t3"
    server = fake("--report-cached", "--token-delay", "0.005")
    result, run = run_json(tmp_path, "--url", server.url, "--clients", "2", "--requests", "5",
                           "--prompt-tokens", str(P), "--output-tokens", "4", "--turns", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "5 requests, 80 prompt tokens, max_tokens 4, 2 conversations of 3 turns" in out
    assert (run["completed"], run["turns"], run["conversations"]) == (5, 3, 2)
    assert len(run["prompts"]["offsets"]) == 2
    question = load_bench_module().question
    records = sorted(run["records"], key=lambda r: r["index"])
    assert [(r["conversation"], r["turn"]) for r in records] == \
        [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2)]
    for prev, r in zip(records, records[1:]):
        if r["turn"] > 1:
            # The same client, sent once the previous turn had finished.
            assert r["client"] == prev["client"]
            assert r["start_s"] >= prev["start_s"] + prev["latency_s"]
            # The fake has seen the previous prompt, not the answer after it.
            assert r["cached_tokens"] == prev["prompt_tokens"]
        else:
            assert r["cached_tokens"] < 32  # heads differ: another document's window
    # What the server saw: two first turns (a window and question 1), and every later turn is
    # exactly an earlier prompt, its answer and the next question.
    prompts = [body["prompt"] for body in server.log()["requests"]]
    firsts = [p for p in prompts if p.endswith(question(0, 1))]
    assert len(firsts) == 2 and all(len(p) == P + len(question(0, 1)) for p in firsts)
    assert firsts[0][:32] != firsts[1][:32]
    seconds = [p + answer + question(1, 2) for p in firsts]
    assert all(p in prompts for p in seconds)
    thirds = [p + answer + question(2, 3) for p in seconds]
    assert sum(1 for p in thirds if p in prompts) == 1  # the conversation of 3 turns
    assert len(prompts) == 5
    # TTFT of first turns against later turns.
    assert run["ttft_first_turns_ms"]["count"] == 2 and run["ttft_later_turns_ms"]["count"] == 3
    later = [r["ttft_s"] * 1000 for r in records if r["turn"] > 1]
    assert run["ttft_later_turns_ms"]["mean"] == pytest.approx(statistics.fmean(later))
    for name in ("Mean TTFT, first turns (ms):", "Mean TTFT, later turns (ms):"):
        assert name in out
    assert run["ttft_first_request_ms"] is None and "TTFT of the first request" not in out
    total = sum(len(p) for p in prompts)
    assert cached_line(run["cached_prompt_tokens"], total) in out


def test_a_failed_turn_ends_its_conversation(fake, tmp_path):
    # One client, two conversations of 3 turns; every second arrival is a 503: turn 2 of each
    # fails, and turn 3 is not sent.
    server = fake("--fail-every", "2")
    result, run = run_json(tmp_path, "--url", server.url, "--requests", "6", "--turns", "3",
                           "--prompt-tokens", "50", "--output-tokens", "2")
    assert result.returncode == 3, result.stdout + result.stderr
    assert (run["completed"], run["failed"], run["not_sent"]) == (2, 2, 2)
    assert run["not_sent_after_failed_turn"] == 2
    assert [(r["conversation"], r["turn"], r["ok"]) for r in run["records"]] == \
        [(0, 1, True), (0, 2, False), (1, 1, True), (1, 2, False)]
    assert "Requests not sent (a turn failed):       2\n" in result.stdout
    assert "Requests not sent (deadline)" not in result.stdout
    assert len(server.log()["requests"]) == 4


def test_deadline_stops_a_server_that_never_answers(fake, tmp_path):
    server = fake("--hang")
    start = time.monotonic()
    result, run = run_json(tmp_path, "--url", server.url, "--clients", "2", "--requests", "5",
                           "--prompt-tokens", "50", "--timeout", "2")
    elapsed = time.monotonic() - start
    assert result.returncode == 3, result.stdout + result.stderr
    # The two running requests end at the deadline (their sockets time out there); the 5 s join
    # grace is for threads that would not, so the bound is 2 s + grace + Python start-up.
    assert elapsed < 2 + 5, elapsed
    assert (run["completed"], run["failed"], run["not_sent"]) == (0, 2, 3)
    assert run["failure_reasons"] == {"deadline": 2}
    assert all(r["latency_s"] < 2.5 for r in run["records"])
    assert "Requests not sent (deadline):            3" in result.stdout


def test_deadline_stops_a_stream_that_trickles(fake, tmp_path):
    # A token every 0.3 s never lets one read wait long, so only a deadline applied to every read
    # (not once per request) ends these 100-token streams (30 s each) at 2 s.
    server = fake("--token-delay", "0.3")
    start = time.monotonic()
    result, run = run_json(tmp_path, "--url", server.url, "--clients", "2", "--requests", "2",
                           "--prompt-tokens", "50", "--output-tokens", "100", "--timeout", "2")
    assert time.monotonic() - start < 2 + 5
    assert result.returncode == 3, result.stdout + result.stderr
    assert run["failure_reasons"] == {"deadline": 2}
    assert all(0 < r["text_chunks"] < 100 for r in run["records"])


def test_deadline_ends_a_read_that_waits(fake, tmp_path):
    # The streams stall after 6 tokens (~1.5 s into a 3 s run): a socket timeout set once per
    # request (to the time left when it started) would let the stalled read run ~1.5 s past the
    # deadline; each read's timeout must be the time left at that read.
    server = fake("--token-delay", "0.25", "--stall-after", "6")
    result, run = run_json(tmp_path, "--url", server.url, "--clients", "2", "--requests", "2",
                           "--prompt-tokens", "50", "--output-tokens", "100", "--timeout", "3")
    assert result.returncode == 3, result.stdout + result.stderr
    assert run["failure_reasons"] == {"deadline": 2}
    for r in run["records"]:
        assert r["text_chunks"] == 6
        assert run["deadline_s"] <= r["start_s"] + r["latency_s"] <= run["deadline_s"] + 0.25, r


@pytest.mark.parametrize("url", ["http://10.1.2.3:8080", "http://example.com:8080",
                                 "http://[2001:db8::1]:80", "http://127.0.0.1.nip.io:80",
                                 "http://0.0.0.0:8080"])
def test_only_loopback(url):
    result = bench("--url", url)
    assert result.returncode == 2
    assert "is not a loopback address" in result.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost"])
def test_unreachable_server_is_a_message(host):
    result = bench("--url", f"http://{host}:{free_port()}", "--timeout", "10")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "pig-bench-serve: error: cannot reach http://" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, flag", [
    (["--clients", "12x"], "--clients"), (["--requests", "0"], "--requests"),
    (["--timeout", "-1"], "--timeout"), (["--pig-json", "[1]"], "--pig-json"),
    (["--extra-json", "{"], "--extra-json"), (["--url", "https://127.0.0.1"], "--url"),
    (["--no-such-flag", "1"], "--no-such-flag"), (["--url"], "--url"),
    (["--turns", "0"], "--turns"), (["--shared-doc", "--turns", "2"], "--turns")])
def test_usage_errors(args, flag):
    result = bench(*args)
    assert result.returncode == 2
    assert flag in result.stderr and "Traceback" not in result.stderr


def test_help_documents_every_option():
    result = bench("--help")
    assert result.returncode == 0
    for option in ("--url", "--api-key", "--model", "--clients", "--requests", "--prompt-tokens",
                   "--output-tokens", "--ignore-eos", "--pig-json", "--extra-json", "--seed",
                   "--timeout", "--label", "--json", "--shared-doc", "--turns", "cached_tokens",
                   "TTFT", "ITL", "TPOT", "Exit status"):
        assert option in result.stdout


def test_offsets_keep_prompt_heads_apart():
    import random
    draw_offsets = load_bench_module().draw_offsets
    # A ring of 40 items where offsets i and i + 20 start the same 4 items: of any two offsets
    # drawn at random, about 1 in 20 pairs collide; the draw must redraw them.
    ring = list(range(20)) * 2
    offsets, apart = draw_offsets(ring, 20, 8, 4, random.Random(1))
    heads = {tuple(ring[o:] + ring[:o])[:4] for o in offsets}
    assert apart and len(offsets) == 20 and len(heads) == 20
    # 21 prompts cannot have distinct heads there: all are drawn, and the draw says so.
    offsets, apart = draw_offsets(ring, 21, 8, 4, random.Random(1))
    assert not apart and len(offsets) == 21


def test_percentile_is_numpys_linear():
    percentile = load_bench_module().percentile
    # numpy.percentile([1, 2, 3, 4], q) for q = 0, 50, 90, 99, 100
    for q, want in ((0, 1.0), (50, 2.5), (90, 3.7), (99, 3.97), (100, 4.0)):
        assert percentile([4, 1, 3, 2], q) == pytest.approx(want)
    assert percentile([5.0], 99) == 5.0


class FakeResponse:
    def __init__(self, data):
        self.stream = io.BytesIO(data)

    def readline(self, limit):
        return self.stream.readline(limit)


class FakeSocket:
    def settimeout(self, value):
        assert value > 0


def test_sse_parser_follows_the_specification():
    module = load_bench_module()
    stream = (b": comment\n\ndata: a\ndata:b\n\nevent: x\nid: 1\ndata:  c\r\n\r\n"
              b"data: d\r\rdata: e\n\ndata: unfinished\n")
    events = [data for _, data in
              module.sse_events(FakeResponse(stream), FakeSocket(), time.perf_counter() + 10)]
    # Multi-line data joined by \n; one leading space dropped; \r\n and lone \r end lines; an
    # event without its blank line at the end of the stream is dropped.
    assert events == ["a\nb", " c", "d", "e"]
