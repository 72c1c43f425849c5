"""The Python module against pig's own reference (pig.ref), on random and adversarial inputs:
every kernel binding for every row format and group size, wrong arrays refused with a
ValueError, outputs written in place without copies, the GIL released, and the model runtime
equal to pig-run. Runs under ctest (python/CMakeLists.txt: PYTHONPATH=build/python)."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import pig

try:
    import torch
except ImportError:  # the parity environment brings torch; without it those cases skip
    torch = None

RNG = np.random.default_rng(20261203)
MODEL = os.path.expanduser(os.environ.get("PIG_CACHE", "~/.cache/pig")) + \
    "/SmolLM2-135M-Instruct.Q4_1.gguf"


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def rows(x, dtype):
    """x (n, d) float32 in a row format, and the float32 values the kernels read from it."""
    if dtype == "f32":
        return x, x
    if dtype == "bf16":
        r = pig.to_bf16(x)
    else:
        r = pig.quantize_q8(x)
    return r, pig.rows_to_f32(r, x.shape[1])


# --- the reference itself ------------------------------------------------------------------------

def test_reference_dense_is_softmax_attention():
    q, K, V = rand(64), rand(50, 64), rand(50, 32)
    out, lse = pig.ref.dense(q, K, V)
    z = (K.astype(np.float64) @ q.astype(np.float64)) / 8.0
    w = np.exp(z - z.max())
    assert lse == pytest.approx(z.max() + np.log(w.sum()), rel=1e-12)
    np.testing.assert_allclose(out, (w / w.sum()) @ V.astype(np.float64), rtol=1e-5, atol=1e-6)


def test_reference_topk_oracle_magicpig_shapes_and_costs():
    q, K, V = rand(64), rand(400, 64), rand(400, 64)
    out, lse, attended = pig.ref.topk(q, K, V, 20)
    assert out.shape == (64,) and attended == 20
    o2, l2, att2 = pig.ref.oracle(q, K, V, 64, seed=3)
    assert o2.shape == (64,) and 1 <= att2 <= 64
    o3, l3, sample, indexed = pig.ref.magicpig(q, K, V, K_bits=8, L=50, sink=4, local=16)
    assert indexed == 400 - 20 and np.all(np.diff(sample.astype(np.int64)) > 0)
    assert np.all((sample >= 4) & (sample < 384))


def test_reference_hybrid_head_tail_and_exact_limits():
    q, K, V = rand(64), rand(500, 64), rand(500, 64)
    out, lse, head, tail, pi, indexed = pig.ref.hybrid(q, K, V, budget=0.1, spec="head=0.25",
                                                       sink=4, local=16)
    assert indexed == 500 - 20 and head.size == round(0.25 * 0.1 * indexed)
    assert not set(head.tolist()) & set(tail.tolist())
    assert np.all(np.diff(tail.astype(np.int64)) > 0) and np.all((pi > 0) & (pi <= 1))
    # The same seed draws the same tail; another seed another one.
    again = pig.ref.hybrid(q, K, V, budget=0.1, spec="head=0.25", sink=4, local=16)
    np.testing.assert_array_equal(again[3], tail)
    other = pig.ref.hybrid(q, K, V, budget=0.1, spec="head=0.25", sink=4, local=16,
                           sample_seed=2)
    assert not np.array_equal(other[3], tail)
    # Everything in the head: exactly dense attention.
    o_all, l_all, *_ = pig.ref.hybrid(q, K, V, budget=1.0, spec="head=1", sink=4, local=16)
    o_dense, l_dense = pig.ref.dense(q, K, V)
    np.testing.assert_allclose(o_all, o_dense, rtol=1e-5, atol=1e-6)
    assert l_all == pytest.approx(l_dense, rel=1e-12)
    for bad in ("head=2", "floor=0", "rank=cosine", "nope", "rank=quant:kbits=5"):
        with pytest.raises(ValueError, match="lsh-hybrid"):
            pig.ref.hybrid(q, K, V, spec=bad)
    # The int4-key ranker (docs/HYBRID.md, rank=quant): the same head size, a seeded tail.
    quant = pig.ref.hybrid(q, K, V, budget=0.1, spec="rank=quant", sink=4, local=16)
    assert quant[2].size == head.size and np.all((quant[4] > 0) & (quant[4] <= 1))
    np.testing.assert_array_equal(
        pig.ref.hybrid(q, K, V, budget=0.1, spec="rank=quant", sink=4, local=16)[3], quant[3])


def test_attention_spec_takes_the_hybrid_flags():
    s = pig.AttentionSpec("lsh-hybrid", budget=0.03, hybrid="head=0.5:floor=0.2")
    assert s.method == "lsh-hybrid"
    assert "head=0.5 floor=0.2 hamming" in repr(s) and "budget=0.03" in repr(s)
    with pytest.raises(ValueError, match="hybrid"):
        pig.AttentionSpec("lsh-hybrid", hybrid="head=-1")
    assert "quant" in repr(pig.AttentionSpec("lsh-hybrid", hybrid="rank=quant"))


def test_attention_spec_errors_name_the_keyword():
    """The keywords read the table of attention fields pig-run's options are made from: a bad value
    is refused with pig-run's message, naming the keyword where pig-run names the flag."""
    for kwargs, message in (
            ({"method": "sparse"}, "method expects one of dense, magicpig"),
            ({"lsh": "K=0"}, "lsh: K = 0 is outside [1, 16]"),
            ({"kv": "f16"}, "kv expects bf16, f32 or q8"),
            ({"sink": 2 ** 25}, "sink expects an integer in [0, 16777216], got '33554432'"),
            ({"local": 2 ** 24 + 1}, "local expects an integer in [0, 16777216]"),
            ({"dense_layers": "0,x"}, "dense_layers expects integers in [0, 65536]"),
            ({"budget": 1.5}, "budget expects a number in (0, 1], got '1.5'"),
            ({"transform": "rotate"}, "transform: hash transform 'rotate'"),
            ({"hybrid": "head=-1"}, "hybrid: lsh-hybrid"),
            ({"hybrid": "@/etc/passwd"}, "hybrid: @FILE is read only from a tool's command line")):
        with pytest.raises(ValueError) as e:
            pig.AttentionSpec(**kwargs)
        assert str(e.value).startswith(message), (kwargs, str(e.value))
    # A float is taken as it is, not through text.
    s = pig.AttentionSpec("topk", budget=0.1 + 0.2, sink=7)
    assert "budget=0.3" in repr(s) and s.sink == 7


# --- the dense kernel ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f32", "bf16", "q8"])
@pytest.mark.parametrize("G", [1, 3])
@pytest.mark.parametrize("n", [1, 7, 300])
def test_dense_kernel_matches_the_reference(dtype, G, n):
    d = 64
    q, K, V = rand(G, d), rand(n, d), rand(n, d)
    kr, kf = rows(K, dtype)
    vr, vf = rows(V, dtype)
    out, lse = pig.dense_attention(q, kr, vr)
    assert out.shape == (G, d) and lse.shape == (G,)
    for h in range(G):
        want, want_lse = pig.ref.dense(q[h], kf, vf)
        np.testing.assert_allclose(out[h], want, rtol=2e-5, atol=2e-5)
        assert lse[h] == pytest.approx(want_lse, rel=1e-5, abs=1e-5)


def test_dense_kernel_on_adversarial_rows():
    d = 64
    q = rand(3, d)
    same = np.tile(rand(1, d), (40, 1))  # all keys equal: uniform weights
    V = rand(40, d)
    out, _ = pig.dense_attention(q, same, V)
    np.testing.assert_allclose(out[0], V.mean(axis=0), rtol=1e-5, atol=1e-5)
    huge = rand(40, d, scale=1e4)  # huge norms: one key takes all the weight, no overflow
    out, lse = pig.dense_attention(q, huge, V)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(lse))
    for h in range(3):
        np.testing.assert_allclose(out[h], pig.ref.dense(q[h], huge, V)[0], rtol=1e-4, atol=1e-4)
    bad = q.copy()
    bad[1, 5] = np.nan  # NaN in: that head's answer is NaN, the others are not
    out, lse = pig.dense_attention(bad, rand(40, d), V)
    assert np.all(np.isnan(out[1])) and np.isnan(lse[1])
    assert np.all(np.isfinite(out[0])) and np.all(np.isfinite(out[2]))
    part, _ = pig.dense_attention(q, same, V, begin=10, end=20)
    np.testing.assert_allclose(part[0], V[10:20].mean(axis=0), rtol=1e-5, atol=1e-5)


# --- the LSH index and the sampled kernel ---------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f32", "bf16", "q8"])
@pytest.mark.parametrize("G", [1, 3])
def test_lsh_index_and_attend_match_the_reference(dtype, G):
    d, n, sink, local = 64, 900, 4, 32
    K, V = rand(n, d), rand(n, d)
    # Queries near some keys, so that sampled sets are neither empty nor everything.
    q = (K[RNG.integers(sink, n - local, G)] + 0.3 * rand(G, d)).astype(np.float32)
    kr, kf = rows(K, dtype)
    vr, vf = rows(V, dtype)
    ix = pig.LshIndex(kr, d, K=8, L=60, t=2, seed=11, sink=sink, local=local)
    assert ix.stats["indexed"] == n - sink - local and len(ix) == n
    tokens, masks = ix.retrieve(q)
    out, lse, st = ix.attend(q, kr, vr)
    assert st["indexed"] == n - sink - local
    union = set()
    for h in range(G):
        want, want_lse, sample, indexed = pig.ref.magicpig(q[h], kf, vf, K_bits=8, L=60, t=2,
                                                           seed=11, sink=sink, local=local)
        assert 0 < len(sample) < indexed, "the test needs a sample that is neither empty nor all"
        mine = tokens if G == 1 else tokens[(masks >> h) & 1 == 1]
        np.testing.assert_array_equal(mine, sample)  # the same sample set, token for token
        assert st["sampled_per_head"][h] == len(sample)
        np.testing.assert_allclose(out[h], want, rtol=1e-4, atol=1e-4)
        assert lse[h] == pytest.approx(want_lse, rel=1e-4, abs=1e-4)
        union |= set(sample.tolist())
    assert st["sampled_union"] == len(union) == len(tokens)


def test_lsh_index_grows_like_a_fresh_one():
    d, sink, local = 64, 4, 16
    K, V = rand(700, d), rand(700, d)
    grown = pig.LshIndex(K[:500], d, K=8, L=40, sink=sink, local=local, capacity=700)
    grown.extend(K[:640])
    grown.extend(K)
    q = (K[100:101] + 0.2 * rand(1, d)).astype(np.float32)
    out, lse, st = grown.attend(q, K, V)
    # The mean stays the one of the build (MagicPIG's rule): the reference's index of the first
    # 500 keys' mean; sampled tokens and weights come from the same codes.
    assert st["indexed"] == 700 - sink - local
    assert np.all(np.isfinite(out))
    with pytest.raises(ValueError, match="capacity"):
        grown.extend(np.vstack([K, rand(10, d)]))
    with pytest.raises(ValueError, match="include the 700"):
        grown.extend(K[:600])


def test_a_short_sequence_is_all_static():
    d = 64
    K, V, q = rand(10, d), rand(10, d), rand(1, d)
    ix = pig.LshIndex(K, d, sink=4, local=64)
    assert ix.stats["indexed"] == 0
    out, lse, st = ix.attend(q, K, V)
    want, want_lse = pig.ref.dense(q[0], K, V)
    np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-5)


# --- bad arrays -----------------------------------------------------------------------------------

def test_wrong_arrays_raise_value_errors_naming_them():
    d = 64
    q, K, V = rand(3, d), rand(100, d), rand(100, d)
    with pytest.raises(ValueError, match="q: expected a 2-D float32 array, got float64"):
        pig.dense_attention(q.astype(np.float64), K, V)
    with pytest.raises(ValueError, match="keys: rows of head dim 64 in f32 have 64 columns"):
        pig.dense_attention(q, rand(100, 32), V)
    with pytest.raises(ValueError, match="keys: expected float32, bfloat16"):
        pig.dense_attention(q, K.astype(np.int32), V)
    with pytest.raises(ValueError, match="C-contiguous"):
        pig.dense_attention(q, np.asfortranarray(K), V)
    with pytest.raises(ValueError, match="C-contiguous"):
        pig.dense_attention(q, rand(200, d)[::2], V)
    with pytest.raises(ValueError, match="a group has 1 to"):
        pig.dense_attention(rand(20, d), K, V)
    with pytest.raises(ValueError, match="same dtype and rows"):
        pig.dense_attention(q, K, V[:50])
    with pytest.raises(ValueError, match="within the 100 rows"):
        pig.dense_attention(q, K, V, begin=5, end=101)
    with pytest.raises(ValueError, match="out: dimension 0 must be 3"):
        pig.dense_attention(q, K, V, out=np.zeros((2, d), np.float32))
    ro = np.zeros((3, d), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        pig.dense_attention(q, K, V, out=ro)
    with pytest.raises(ValueError, match="multiple of 32"):
        pig.quantize_q8(rand(4, 48))
    with pytest.raises(ValueError, match="K = 0|K"):
        pig.LshIndex(K, d, K=0)
    with pytest.raises(ValueError, match="built from f32 rows, got bf16"):
        ix = pig.LshIndex(K, d)
        ix.attend(q, pig.to_bf16(K), V)
    with pytest.raises(ValueError, match="K and V must have the same number of rows"):
        pig.ref.dense(q[0], K, V[:10])
    with pytest.raises(ValueError, match="hash transform|transform"):
        pig.LshIndex(K, d, transform="rotate")


# --- every argument checked where it is given ---------------------------------------------------

NAN = float("nan")


def arg(name, call, match):
    return pytest.param(call, match, id=name)


@pytest.mark.parametrize("call, match", [
    # a softmax scale: positive and finite (NaN made every output NaN)
    arg("ref.dense-scale-nan", lambda q, K, V: pig.ref.dense(q[0], K, V, scale=NAN), "scale"),
    arg("ref.magicpig-scale-0", lambda q, K, V: pig.ref.magicpig(q[0], K, V, scale=0.0), "scale"),
    arg("dense-scale-nan", lambda q, K, V: pig.dense_attention(q, K, V, scale=NAN), "scale"),
    arg("dense-scale-negative", lambda q, K, V: pig.dense_attention(q, K, V, scale=-0.125),
        "scale"),
    arg("attend-scale-inf", lambda q, K, V: pig.LshIndex(K, 64, sink=4, local=8).attend(
        q, K, V, scale=float("inf")), "scale"),
    # counts: m and B at least 1, B bounded (2**62 draws ran for ever)
    arg("ref.topk-m-0", lambda q, K, V: pig.ref.topk(q[0], K, V, 0), "m must be in"),
    arg("ref.oracle-B", lambda q, K, V: pig.ref.oracle(q[0], K, V, 2 ** 24 + 1), "B must be in"),
    # sink and local within pig-run's bounds (2**63 + 2**63 wrapped to 0: everything indexed)
    arg("index-sink-local-wrap", lambda q, K, V: pig.LshIndex(K, 64, sink=2 ** 63, local=2 ** 63),
        "sink must be in"),
    arg("index-local", lambda q, K, V: pig.LshIndex(K, 64, local=2 ** 64 - 1), "local must be in"),
    arg("ref.magicpig-sink", lambda q, K, V: pig.ref.magicpig(q[0], K, V, sink=2 ** 64 - 1),
        "sink must be in"),
    arg("ref.hybrid-local", lambda q, K, V: pig.ref.hybrid(q[0], K, V, local=2 ** 25),
        "local must be in"),
    # a capacity that wrapped the scratch's size (2**64 - 1 + slack) or failed in reserve()
    arg("index-capacity-max", lambda q, K, V: pig.LshIndex(K, 64, capacity=2 ** 64 - 1),
        "capacity must be in"),
    arg("index-capacity-2**40", lambda q, K, V: pig.LshIndex(K, 64, capacity=2 ** 40),
        "capacity must be in"),
    # a head dim the kernel registry's int key read as 0
    arg("index-d", lambda q, K, V: pig.LshIndex(K, 2 ** 40), "d must be in"),
    arg("describe-d", lambda q, K, V: pig.describe_kernels(10, 150, 2 ** 40), "d must be in"),
    arg("rows_to_f32-d", lambda q, K, V: pig.rows_to_f32(K, 2 ** 40), "d must be in"),
])
def test_arguments_out_of_range_raise_value_errors(call, match):
    q, K, V = rand(1, 64), rand(100, 64), rand(100, 64)
    with pytest.raises(ValueError, match=match):
        call(q, K, V)


@pytest.mark.skipif(not os.path.exists(MODEL), reason="the model is not installed (./pig setup)")
def test_session_arguments_are_checked_before_anything_runs():
    model = pig.Model(MODEL)
    for kw, match in ((dict(threads=1025), "threads must be in"),
                      (dict(capacity=2 ** 64 - 1), "capacity must be in"),
                      (dict(capacity=2 ** 40), "capacity must be in")):
        with pytest.raises(ValueError, match=match):
            model.session(**kw)
    s = model.session(capacity=64, threads=1)
    ids = model.encode("The capital of France is")
    # max_new = 2**64 - 1 wrapped the capacity check: the session generated until its context
    # was full, then raised. Refused now before the prefill: nothing ran.
    for kw, match in ((dict(max_new=2 ** 64 - 1), "max_new must be in"),
                      (dict(max_new=2 ** 24), "max_new: the session's capacity"),
                      (dict(max_new=64 - len(ids) + 2), "max_new: the session's capacity"),
                      (dict(temperature=NAN), "temperature"),
                      (dict(temperature=-1.0), "temperature"),
                      (dict(temperature=1e7), "temperature"),
                      (dict(top_p=0.0), "top_p"),
                      (dict(top_p=1.5), "top_p"),
                      (dict(top_p=NAN), "top_p")):
        with pytest.raises(ValueError, match=match):
            s.generate(ids, **kw)
        assert s.position == 0, kw
    # the largest max_new that fits: the prompt and max_new - 1 tokens fill the 64 positions
    out = s.generate(ids, max_new=64 - len(ids) + 1, temperature=0.5, top_p=0.9, seed=3)
    assert 1 <= len(out) <= 64 - len(ids) + 1


# A process whose address space leaves room for a few thread stacks, asking for 1000 threads
# (within the 1024 allowed): the pool must raise, with the threads it started joined. It hung
# (the half-built pool's condition variable destroyed while its started workers waited on it).
THREADS_UNDER_A_MEMORY_LIMIT = r"""
import os, resource, sys
import pig
model = pig.Model(sys.argv[1]) if os.path.exists(sys.argv[1]) else None
with open("/proc/self/statm") as f:
    mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
limit = mapped + (256 << 20)  # 1000 stacks of 8 MiB do not fit
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
makers = [("paged", lambda: pig.PagedAttention(pig.AttentionSpec("magicpig"), 2, 4, 2, 64, 16,
                                                max_tokens=1024, threads=1000))]
if model is not None:
    makers.append(("session", lambda: model.session(capacity=64, threads=1000)))
for name, make in makers:
    try:
        make()
        print(name, "started every thread")
    except RuntimeError as e:
        print(name, "RuntimeError:", e)
    sys.stdout.flush()
# the pool is usable again with a sane count, in the same process
pig.PagedAttention(pig.AttentionSpec("magicpig"), 2, 4, 2, 64, 16, max_tokens=1024, threads=2)
print("done")
"""


def test_threads_that_cannot_start_raise_instead_of_hanging():
    try:
        run = subprocess.run([sys.executable, "-c", THREADS_UNDER_A_MEMORY_LIMIT, MODEL],
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("creating 1000 threads under a memory limit hung")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[-1] == "done", run.stdout
    for line in lines[:-1]:
        assert "RuntimeError: thread pool: 1000 threads requested, only" in line, run.stdout


# --- zero copies, torch, threads ---------------------------------------------------------------

def test_out_is_written_in_place_and_returned():
    d = 64
    q, K, V = rand(3, d), rand(64, d), rand(64, d)
    buf = np.full((3, d), 7.0, np.float32)
    out, _ = pig.dense_attention(q, K, V, out=buf)
    assert out is buf  # the caller's array, no copy
    np.testing.assert_allclose(buf[0], pig.ref.dense(q[0], K, V)[0], rtol=1e-5, atol=1e-5)
    ix = pig.LshIndex(K, d, sink=4, local=8)
    out2, _, _ = ix.attend(q, K, V, out=buf)
    assert out2 is buf


@pytest.mark.skipif(torch is None, reason="torch is not installed (the parity environment)")
def test_torch_tensors_and_bfloat16():
    d = 64
    K32 = torch.randn(120, d)
    V32 = torch.randn(120, d)
    q = torch.randn(3, d)
    Kb, Vb = K32.to(torch.bfloat16), V32.to(torch.bfloat16)
    out, lse = pig.dense_attention(q, Kb, Vb)
    for h in range(3):
        want, _ = pig.ref.dense(q[h].numpy(), Kb.float().numpy(), Vb.float().numpy())
        np.testing.assert_allclose(out[h], want, rtol=2e-5, atol=2e-5)
    buf = torch.zeros(3, d)
    res, _ = pig.dense_attention(q, K32, V32, out=buf)
    assert res is buf and buf.abs().sum() > 0  # written in place
    # A bf16 tensor and its uint16 bits are the same rows.
    bits = Kb.view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(pig.rows_to_f32(bits, d), Kb.float().numpy())
    with pytest.raises(ValueError, match="C-contiguous"):
        pig.dense_attention(q, K32.t().contiguous().t(), V32)


def test_threads_get_the_same_answers_and_the_gil_is_released():
    d = 64
    K, V = rand(4000, d), rand(4000, d)
    q = rand(3, d)
    want, _ = pig.dense_attention(q, K, V)
    results = [None] * 4

    def work(i):
        results[i] = pig.dense_attention(q, K, V)[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, want)
    # While the reference grinds through a long call in a thread, this thread keeps running
    # Python: the call does not hold the GIL.
    big_K, big_V = rand(300000, d), rand(300000, d)
    done = threading.Event()
    t = threading.Thread(target=lambda: (pig.ref.dense(q[0], big_K, big_V), done.set()))
    ticks = 0
    t.start()
    while not done.is_set():
        ticks += 1
    t.join()
    assert ticks > 1000, ticks


# --- the registry and the runtime ---------------------------------------------------------------

def test_the_kernels_that_serve():
    assert pig.simd_target() in {"AVX3_DL", "AVX3", "AVX2", "SSE4", "SCALAR", "AVX3_ZEN4"}
    text = pig.describe_kernels(10, 150, 64, "bf16")
    assert ("specialised" in text or "generic" in text) and "K=10 L=150 d=64" in text
    with pytest.raises(ValueError, match="dtype"):
        pig.describe_kernels(10, 150, 64, "f16")
    assert isinstance(pig.registered_kernels(), list)


@pytest.mark.skipif(not os.path.exists(MODEL), reason="the model is not installed (./pig setup)")
def test_sessions_share_prompt_prefixes():
    """Model.session(prefix_cache=True): a second session on the same document attaches the
    first one's cached KV blocks and generates what a session without the cache generates."""
    model = pig.Model(MODEL)
    doc = model.encode("The river runs north past seven stone lamps. " * 20)
    q1 = doc + model.encode(" Where does it run?", add_bos=False)
    q2 = doc + model.encode(" What stands by it?", add_bos=False)
    for i, spec in enumerate((pig.AttentionSpec(), pig.AttentionSpec("magicpig", local=16))):
        want = model.session(spec, capacity=len(q2) + 8, threads=2).generate(q2, max_new=6)
        a = model.session(spec, capacity=len(q1) + 8, threads=2, prefix_cache=True)
        a.generate(q1, max_new=2)
        # the KV rows do not depend on the method: magicpig's first session finds dense's blocks
        assert (a.stats["cached_tokens"] == 0) == (i == 0)
        b = model.session(spec, capacity=len(q2) + 8, threads=2, prefix_cache=True)
        assert b.generate(q2, max_new=6) == want, spec
        cached = b.stats["cached_tokens"]
        assert cached >= 128 and cached % 64 == 0 and cached <= len(doc), cached
    st = model.prefix_stats
    assert st["hits"] >= 2 and st["hit_tokens"] >= 256 and st["bytes"] > 0


@pytest.mark.skipif(not os.path.exists(MODEL), reason="the model is not installed (./pig setup)")
def test_sessions_share_the_lsh_index_of_a_cached_prefix():
    """mean_window="prefix": sessions that attach a cached document centre on its keys' mean and
    stand on one LSH index over it (stats["shared_index_bytes"]); each generates what a session
    without the cache generates with mean_window = its cached tokens - sink."""
    model = pig.Model(MODEL)
    doc = model.encode("Nine copper bells ring over the western harbour at dawn. " * 30)
    questions = [doc + model.encode(q, add_bos=False)
                 for q in (" The bells ring at", " The harbour lies to the", " The bells are made of")]
    spec = pig.AttentionSpec("magicpig", local=16, mean_window="prefix")
    assert spec.mean_window == "prefix" and pig.AttentionSpec("magicpig").mean_window == 0
    with pytest.raises(ValueError, match="mean_window"):
        pig.AttentionSpec("magicpig", mean_window="all")
    sessions = []
    for q in questions:
        s = model.session(spec, capacity=len(q) + 8, threads=2, prefix_cache=True)
        got = s.generate(q, max_new=6)
        sessions.append(s)
        cached = s.stats["cached_tokens"]
        window = pig.AttentionSpec("magicpig", local=16, mean_window=max(cached - 4, 0))
        want = model.session(window, capacity=len(q) + 8, threads=2).generate(q, max_new=6)
        assert got == want and len(got) == 6, (cached, got, want)
    assert sessions[0].stats["cached_tokens"] == 0 and sessions[0].stats["shared_index_bytes"] == 0
    for s in sessions[1:]:
        assert s.stats["cached_tokens"] >= 256
        assert 0 < s.stats["index_bytes"] < s.stats["shared_index_bytes"], s.stats
    assert sessions[1].stats["shared_index_bytes"] == sessions[2].stats["shared_index_bytes"]


@pytest.mark.skipif(not os.path.exists(MODEL), reason="the model is not installed (./pig setup)")
def test_dense_below_decodes_short_sessions_densely():
    """dense_below=N: a magicpig session shorter than N positions decodes densely (dense's tokens,
    nothing sampled); "measured" is the length timed on this machine; 0, the default, samples."""
    assert pig.AttentionSpec("magicpig").dense_below == 0
    assert pig.AttentionSpec("magicpig", dense_below="measured").dense_below == "measured"
    with pytest.raises(ValueError, match="dense_below"):
        pig.AttentionSpec("magicpig", dense_below="often")
    model = pig.Model(MODEL)
    prompt = model.encode("Nine copper bells ring over the western harbour at dawn. " * 20)
    n = len(prompt) + 8

    def run(spec):
        s = model.session(spec, capacity=n, threads=2)
        return s.generate(prompt, max_new=8), s.stats

    dense, _ = run(pig.AttentionSpec("dense"))
    short, stats = run(pig.AttentionSpec("magicpig", local=16, dense_below=n + 1))
    assert short == dense and stats["index_bytes"] == 0, stats
    _, sampled = run(pig.AttentionSpec("magicpig", local=16))
    assert sampled["index_bytes"] > 0


@pytest.mark.skipif(not os.path.exists(MODEL), reason="the model is not installed (./pig setup)")
def test_the_runtime_decodes_like_pig_run():
    model = pig.Model(MODEL)
    assert model.config["n_layers"] == 30
    prompt = "Paris is the capital of France and its largest city. " * 13
    ids = model.encode(prompt)
    for spec, flags in ((pig.AttentionSpec(), []),
                        (pig.AttentionSpec("magicpig", local=16),
                         ["--attention", "magicpig", "--local", "16"])):
        s = model.session(spec, capacity=len(ids) + 16, threads=2)
        got = s.generate(ids, max_new=12)
        run = subprocess.run([os.environ.get("PIG_RUN", "pig-run"), "--threads", "2", "--prompt",
                              prompt, "--max-new", "12", "--print-ids", *flags],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        line = next(x for x in run.stdout.splitlines() if x.startswith("generated ids:"))
        assert got == [int(x) for x in line.split(":")[1].split()], (spec, run.stdout)
        if spec.method == "magicpig":
            assert s.stats["cost2"] > 0
    with pytest.raises(ValueError, match="pig.lsh|--lsh|K = 0"):
        pig.AttentionSpec("magicpig", lsh="K=0")
    probe = pig.AttentionSpec("magicpig", lsh="K=11,L=75,r=1")  # multi-probe (docs/RESULTS.md)
    assert (probe.K, probe.L, probe.t, probe.r) == (11, 75, 2, 1)
    with pytest.raises(ValueError, match="r = 4"):
        pig.AttentionSpec("magicpig", lsh="r=4")
    s = model.session(capacity=8)
    with pytest.raises(ValueError, match="capacity"):
        s.forward(list(range(9)))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        s.forward([10 ** 7])
    assert model.decode(model.encode("hello world", add_bos=False)) == "hello world"
    assert len(model.encode_chat([("user", "Hi")])) > 3
