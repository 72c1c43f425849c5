"""pig.PagedAttention (decode over an engine's paged KV cache, vLLM's CPU layout) against the
contiguous bindings: the cache's pages hold the same rows as a contiguous array, and every decode
row gives, bit for bit, what pig.dense_attention (method dense, dense layers, short sequences) and
pig.LshIndex (magicpig) give over the contiguous rows. Then the per-request state's life cycle,
threads, and every refused argument."""
import threading

import numpy as np
import pytest

import pig

RNG = np.random.default_rng(20261204)
LAYERS, HQ, HKV, D, BS = 4, 6, 2, 64, 16
G = HQ // HKV


def spec(method="magicpig"):
    # Layer 1 dense; 0, 2, 3 sampled (K=8, L=75), sink 4, local 32.
    return pig.AttentionSpec(method, lsh="K=8,L=75,t=2", sink=4, local=32, dense_layers="1")


class Paged:
    """A paged cache of LAYERS layers (uint16 bf16 bits: NumPy has no bfloat16), requests with
    shuffled block tables, and the contiguous rows of each request for the oracle."""

    def __init__(self, blocks=64):
        self.cache = np.full((LAYERS, blocks, HKV, 2 * BS, D), 0xFFFF, np.uint16)  # NaN elsewhere
        self.free_blocks = list(RNG.permutation(blocks))
        self.tables, self.keys, self.values = {}, {}, {}

    def add(self, rid, n):
        """A request with n tokens of random keys (in a cone) and values in every layer."""
        nblocks = (n + 64 + BS - 1) // BS  # room to grow by 64
        self.tables[rid] = np.array([self.free_blocks.pop() for _ in range(nblocks)], np.int32)
        self.keys[rid] = np.zeros((LAYERS, HKV, 0, D), np.uint16)
        self.values[rid] = np.zeros((LAYERS, HKV, 0, D), np.uint16)
        self.grow(rid, n)

    def grow(self, rid, count):
        offset = RNG.standard_normal(D).astype(np.float32) * 2
        for kind, store in (("k", self.keys), ("v", self.values)):
            x = RNG.standard_normal((LAYERS * HKV * count, D)).astype(np.float32)
            if kind == "k":
                x += offset
            b = pig.to_bf16(x).reshape(LAYERS, HKV, count, D)
            store[rid] = np.concatenate([store[rid], b], axis=2)
        n = self.keys[rid].shape[2]
        table = self.tables[rid]
        for i in range(n - count, n):
            blk, row = table[i // BS], i % BS
            self.cache[:, blk, :, row, :] = self.keys[rid][:, :, i, :]
            self.cache[:, blk, :, BS + row, :] = self.values[rid][:, :, i, :]

    def n(self, rid):
        return self.keys[rid].shape[2]

    def args(self, rids):
        m = max(len(self.tables[r]) for r in rids)
        bt = np.zeros((len(rids), m), np.int32)
        for i, r in enumerate(rids):
            bt[i, :len(self.tables[r])] = self.tables[r]
        return bt, np.array([self.n(r) for r in rids], np.int32)


def test_decode_equals_the_contiguous_kernels_bit_for_bit():
    pc = Paged()
    rids = ["long", "short", "mid"]
    for rid, n in zip(rids, (400, 30, 150)):  # "short" is below sink + local + 16 at first
        pc.add(rid, n)
    pa = pig.PagedAttention(spec(), LAYERS, HQ, HKV, D, BS, max_tokens=1024, threads=2)
    scale = 0.125
    indexes = {}  # the oracle's LshIndex per (request, layer, kv-head)
    for step in range(40):
        for rid in rids:
            pc.grow(rid, 1)
        bt, lens = pc.args(rids)
        for layer in range(LAYERS):
            q = RNG.standard_normal((len(rids), HQ, D)).astype(np.float32)
            out = np.full_like(q, np.nan)
            pa.decode(layer, rids, q, pc.cache[layer], bt, lens, out, scale)
            for i, rid in enumerate(rids):
                n = pc.n(rid)
                for h in range(HKV):
                    k, v = pc.keys[rid][layer, h], pc.values[rid][layer, h]
                    qg = np.ascontiguousarray(q[i, h * G:(h + 1) * G])
                    key = (rid, layer, h)
                    if layer == 1 or (key not in indexes and n - 36 < 16):
                        want, _ = pig.dense_attention(qg, k, v, scale=scale)
                    else:
                        if key not in indexes:
                            indexes[key] = pig.LshIndex(
                                np.ascontiguousarray(k[:n - 1]), D, K=8, L=75, t=2, sink=4,
                                local=32, capacity=1024)
                        indexes[key].extend(np.ascontiguousarray(k))
                        want, _, _ = indexes[key].attend(qg, k, v, scale=scale)
                    got = out[i, h * G:(h + 1) * G]
                    assert np.array_equal(want, got), (rid, layer, h, step)
    assert pa.requests == sorted(rids)
    assert pa.bytes > 0
    assert 0 < pa.stats["cost2"] < 1
    for rid in rids:
        pa.free(rid)
    pa.free("never seen")
    assert pa.requests == [] and pa.bytes == 0


def test_dense_method_keeps_no_index():
    pc = Paged()
    pc.add("a", 300)
    pa = pig.PagedAttention(spec("dense"), LAYERS, HQ, HKV, D, BS, max_tokens=1024)
    bt, lens = pc.args(["a"])
    q = RNG.standard_normal((1, HQ, D)).astype(np.float32)
    out = np.zeros_like(q)
    pa.decode(2, ["a"], q, pc.cache[2], bt, lens, out, 0.125)
    want, _ = pig.dense_attention(np.ascontiguousarray(q[0, :G]), pc.keys["a"][2, 0],
                                  pc.values["a"][2, 0], scale=0.125)
    assert np.array_equal(want, out[0, :G])
    assert pa.bytes == 0


def test_threads_share_one_object():
    pc = Paged(blocks=128)
    rids = [f"r{i}" for i in range(4)]
    for r in rids:
        pc.add(r, 200)
    pa = pig.PagedAttention(spec(), LAYERS, HQ, HKV, D, BS, max_tokens=1024)
    outs, errors = {}, []

    def run(rid):
        try:
            bt, lens = pc.args([rid])
            q = np.ones((1, HQ, D), np.float32)
            o = np.zeros_like(q)
            for layer in range(LAYERS):
                pa.decode(layer, [rid], q, pc.cache[layer], bt, lens, o, 0.125)
            outs[rid] = o
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(r,)) for r in rids]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and sorted(outs) == rids and pa.requests == rids
    assert all(np.isfinite(o).all() for o in outs.values())


def test_refused_arguments():
    pc = Paged()
    pc.add("a", 100)
    pa = pig.PagedAttention(spec(), LAYERS, HQ, HKV, D, BS, max_tokens=256)
    bt, lens = pc.args(["a"])
    q = np.zeros((1, HQ, D), np.float32)
    out = np.zeros_like(q)
    cache = pc.cache[0]
    cases = [
        dict(query=np.zeros((1, HQ, D), np.float64)),               # dtype
        dict(query=np.zeros((1, HQ, D + 1), np.float32)),           # head dim
        dict(out=np.zeros((1, HQ, D), np.uint16)),                  # out dtype differs
        dict(kv_cache=np.zeros((4, HKV, BS, D), np.uint16)),        # not 2 * block_size rows
        dict(kv_cache=np.zeros((4, 3, 2 * BS, D), np.uint16)),      # kv-heads
        dict(kv_cache=pc.cache[0][:, :, ::2]),                      # strided
        dict(kv_cache=np.zeros((4, HKV, 2 * BS, D), np.float32)),   # f32 cache, bf16 spec
        dict(block_table=bt.astype(np.int64)),                      # index dtype
        dict(block_table=bt[:, :2]),                                # too short for 100 tokens
        dict(block_table=np.full_like(bt, 64)),                     # block outside the cache
        dict(seq_lens=np.array([0], np.int32)),                     # empty sequence
        dict(seq_lens=np.array([300], np.int32)),                   # past max_tokens
        dict(req_ids=["a", "a"], query=np.zeros((2, HQ, D), np.float32),
             out=np.zeros((2, HQ, D), np.float32), block_table=np.repeat(bt, 2, 0),
             seq_lens=np.repeat(lens, 2)),                          # one request twice
        dict(layer=LAYERS),                                         # layer outside the model
    ]
    base = dict(layer=0, req_ids=["a"], query=q, kv_cache=cache, block_table=bt, seq_lens=lens,
                out=out, scale=0.125)
    for c in cases:
        with pytest.raises(ValueError):
            pa.decode(**{**base, **c})
    assert pa.requests == []  # refused before any state was made
    pa.decode(**base)
    assert pa.requests == ["a"]
    with pytest.raises(ValueError, match="q8"):  # pig's own row format, not an engine's
        pig.PagedAttention(pig.AttentionSpec("magicpig", kv="q8"), LAYERS, HQ, HKV, D, BS)
    with pytest.raises(ValueError, match="scale"):  # the requests' attention was made for 0.125
        pa.decode(**{**base, "req_ids": ["b"], "scale": 0.25})
    with pytest.raises(ValueError):
        pig.PagedAttention(spec(), LAYERS, 7, HKV, D, BS)  # heads not in groups
    with pytest.raises(ValueError):
        pig.PagedAttention(spec(), LAYERS, HQ, HKV, D, 0)  # block size
    for scale in (float("nan"), float("inf"), 0.0, -0.125):
        with pytest.raises(ValueError, match="scale"):
            pa.decode(**{**base, "scale": scale})


def arg(match, **kw):
    return pytest.param(kw, match, id=",".join(f"{k}={v}" for k, v in kw.items()))


@pytest.mark.parametrize("kw, match", [
    # 0 query heads divide any kv-head count: accepted, then the next decode aborted the
    # interpreter (assertion a.G >= 1 in the kernels)
    arg("num_q_heads must be in", num_q_heads=0),
    arg("num_q_heads must be in", num_q_heads=2 ** 17),
    arg("num_kv_heads must be in", num_kv_heads=0),
    arg("num_kv_heads must be in", num_kv_heads=HQ * 2),
    arg("must be a multiple of num_kv_heads", num_kv_heads=4),
    arg("num_layers must be in", num_layers=0),
    arg("num_layers must be in", num_layers=2 ** 40),
    arg("head_dim must be in", head_dim=0),
    arg("head_dim must be in", head_dim=2 ** 40),  # the kernel registry's int key read 0
    arg("block_size must be in", block_size=2 ** 63),  # 2 * block_size wrapped at decode
    arg("max_tokens must be in", max_tokens=0),
    arg("max_tokens must be in", max_tokens=2 ** 62),  # a MemoryError at the first decode
    arg("max_tokens must be in", max_tokens=2 ** 64 - 1),  # the scratch's size wrapped
    arg("threads must be in", threads=1025),
])
def test_constructor_arguments_are_checked_where_given(kw, match):
    args = dict(spec=spec(), num_layers=LAYERS, num_q_heads=HQ, num_kv_heads=HKV, head_dim=D,
                block_size=BS, max_tokens=1024, threads=1)
    with pytest.raises(ValueError, match=match):
        pig.PagedAttention(**{**args, **kw})
