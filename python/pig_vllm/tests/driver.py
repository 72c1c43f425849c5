"""Runs one vLLM configuration over a list of tasks and writes the results as JSON.

    python driver.py JOB.json OUT.json

The tests start one driver process per configuration (vLLM's start is ~60 s, so each LLM
serves every task of its configuration), which keeps each configuration's environment
(VLLM_PLUGINS, the pig settings) to its own process tree. JOB: {"pig": null (vLLM's stock
backend, the plugin not loaded) or {additional_config["pig"]}, "llm": {extra LLM arguments},
"tasks": [{"name", "prompts": [token ids | {"chat": text}], "max_tokens", "ignore_eos",
"solo": bool (also each prompt alone), "repeat": n, "logprobs": k (record the top k)}],
"all_ranks": bool (stats of every tensor-parallel rank, a list; default rank 0's)}.
"""
import json
import os
import sys
import time


def main() -> int:
    job_path, out_path = sys.argv[1:]
    with open(job_path) as f:
        job = json.load(f)
    t0 = time.monotonic()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    args = dict(model=job["model"], enforce_eager=True, dtype="bfloat16", max_model_len=8192,
                seed=0)
    if job.get("pig") is not None:
        args.update(worker_cls="pig_vllm.worker.PigWorker", additional_config={"pig": job["pig"]})
    args.update(job.get("llm", {}))
    t_import = time.monotonic() - t0
    llm = LLM(**args)
    t_start = time.monotonic() - t0 - t_import
    tokenizer = llm.get_tokenizer()

    def live():
        if job.get("pig") is None:
            return []
        return sorted(set().union(*llm.collective_rpc("pig_live_requests")))

    def stats():
        if job.get("pig") is None:
            return {}
        ranks = llm.collective_rpc("pig_stats")
        return ranks if job.get("all_ranks") else ranks[0]

    def run(prompts, params):
        inputs = []
        for p in prompts:
            if isinstance(p, dict):
                text = tokenizer.apply_chat_template([{"role": "user", "content": p["chat"]}],
                                                     add_generation_prompt=True, tokenize=False)
                ids = tokenizer.encode(text, add_special_tokens=False)
                inputs.append(TokensPrompt(prompt_token_ids=list(ids)))
            else:
                inputs.append(TokensPrompt(prompt_token_ids=p))
        outs = llm.generate(inputs, params, use_tqdm=False)
        res = []
        for o in outs:
            c = o.outputs[0]
            r = {"prompt_tokens": len(o.prompt_token_ids), "tokens": list(c.token_ids),
                 "text": c.text, "cached": o.num_cached_tokens or 0}
            if c.logprobs:  # per step: the top candidates, best first, as [token, logprob]
                r["top"] = [sorted(([t, float(lp.logprob)] for t, lp in step.items()),
                                   key=lambda x: -x[1]) for step in c.logprobs]
            res.append(r)
        return res

    results = {}
    for task in job["tasks"]:
        params = SamplingParams(temperature=0.0, max_tokens=task["max_tokens"],
                                ignore_eos=task.get("ignore_eos", False),
                                logprobs=task.get("logprobs"))
        t = time.monotonic()
        r = {"batch": []}
        for _ in range(task.get("repeat", 1)):
            r["batch"].append(run(task["prompts"], params))
        r["live_after_batch"] = live()
        if task.get("solo"):
            r["solo"] = [run([p], params)[0] for p in task["prompts"]]
        # The scheduler tells the workers of finished requests one step late (in a step with
        # nothing to run if need be); measured, they have arrived by the time generate returns
        # (live_after_batch is empty), and surely after the solo runs.
        r["live"] = live()
        r["stats"] = stats()
        r["seconds"] = round(time.monotonic() - t, 1)
        results[task["name"]] = r
    results["_times"] = {"import": round(t_import, 1), "start": round(t_start, 1),
                         "total": round(time.monotonic() - t0, 1)}
    with open(out_path + ".tmp", "w") as f:
        json.dump(results, f)
    os.replace(out_path + ".tmp", out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
