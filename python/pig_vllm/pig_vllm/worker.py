"""PigWorker: vLLM's CPU worker, plus what pig_vllm needs to know about requests.

vLLM's attention metadata carries no request ids; row i of a batch is request
`model_runner.input_batch.req_ids[i]`. The worker registers its model runner with
pig_vllm.state, and before each step frees the state of the requests the scheduler reports
finished (these arrive one step late, possibly in a step with nothing to run), preempted or
resumed. Use it with `worker_cls="pig_vllm.worker.PigWorker"` (server: `--worker-cls ...`).
"""
from vllm.v1.worker.cpu_worker import CPUWorker

from . import state


class PigWorker(CPUWorker):
    def init_device(self):
        super().init_device()
        state.set_model_runner(self.model_runner)

    def execute_model(self, scheduler_output):
        state.on_schedule(scheduler_output)
        return super().execute_model(scheduler_output)

    # For collective_rpc (tests, diagnostics): LLM.collective_rpc("pig_live_requests").
    def pig_live_requests(self) -> list[str]:
        return state.live_requests()

    def pig_stats(self) -> dict:
        return state.stats()
