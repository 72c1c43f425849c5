#!/usr/bin/env python3
"""Small random-weight models of the architectures pig loads, for the architecture parity tests.

For each architecture this writes, into --out/<arch>/:
  hf/           the model in Hugging Face format (config.json, model.safetensors)
  model.gguf    the same weights as GGUF, laid out as llama.cpp's converter lays them out (the
                Q/K row permutation of the llama family, the +1 of Gemma's norms, Phi-3's fused
                projections), with the tokenizer of pig's default model copied from --tokenizer-gguf
  ids.txt       the token ids of the reference run (random, fixed by the seed)
  logits.bin    transformers' float32 logits for those ids, every position (n x vocab, row-major)

Everything is deterministic from --seed and made at test time (a few MB per model); nothing is
committed. transformers builds each model from a config (random weights), so the comparison is as
strict as on a trained model: every tensor, norm, rotary layout and attention rule counts.

The weights are drawn larger than transformers' default initialisation (std 0.2 instead of 0.02)
so that attention is peaked, not uniform: with near-uniform attention a wrong rotary layout or a
wrong window would barely move the logits and the test could not fail.

Exit codes as python/parity_reference.py: 77 (ctest's "skipped") only when PIG_PARITY=0, or when
the parity environment was never installed (no --stamp file) and CI is unset; everywhere else a
failure to import or run transformers is a failure.
"""
import argparse
import json
import math
import os
import sys
import traceback

SKIP = 77
FAIL = 1
VOCAB = 49152  # the default model's tokenizer (SmolLM2)
N_IDS = 40  # positions of the reference run: past every sliding window below (16)
WINDOW = 16


def in_ci():
    return os.environ.get("CI", "").lower() in ("true", "1")


# Each architecture: transformers' config class and its arguments, the GGUF architecture name.
# Shapes are tiny (hidden 64, 2-6 layers) but keep what distinguishes the architecture: GQA,
# explicit head dims that differ from hidden / heads, biases, windows, soft-capping.
def architectures():
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, rms_norm_eps=1e-5,
                  max_position_embeddings=4096, initializer_range=0.2, tie_word_embeddings=True,
                  bos_token_id=1, eos_token_id=2, pad_token_id=None)
    return {
        # Llama 3.x: 'llama3' rotary frequency scaling, which llama.cpp stores as rope_freqs.
        "llama3": ("LlamaConfig", "llama", dict(
            common, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            rope_theta=500000.0, tie_word_embeddings=False, max_position_embeddings=16384,
            rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=8192))),
        # Qwen2.5: q/k/v biases, NEOX rotary layout.
        "qwen2": ("Qwen2Config", "qwen2", dict(
            common, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            rope_theta=1000000.0, use_sliding_window=False)),
        # Qwen2.5 with YaRN (its long-context configuration): the same weights as qwen2 (same
        # seed and shapes), so the test also holds qwen2's file with YaRN set by flags to these
        # logits. original_max_position_embeddings is small so that YaRN's ramp covers the
        # frequencies.
        "qwen2_yarn": ("Qwen2Config", "qwen2", dict(
            common, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            rope_theta=1000000.0, use_sliding_window=False,
            rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32))),
        # Qwen3: per-head RMSNorm of q and k, head dim given apart from hidden / heads.
        "qwen3": ("Qwen3Config", "qwen3", dict(
            common, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, rope_theta=1000000.0, use_sliding_window=False)),
        # Mistral: every layer attends within a sliding window (llama.cpp: arch llama).
        "mistral": ("MistralConfig", "llama", dict(
            common, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            head_dim=32, rope_theta=1000000.0, sliding_window=WINDOW)),
        # Gemma 2: local (even) and global (odd) layers, attention and final logit soft-capping,
        # norms before and after each block, scaled embeddings, GeGLU, query_pre_attn_scalar.
        "gemma2": ("Gemma2Config", "gemma2", dict(
            common, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            head_dim=32, query_pre_attn_scalar=64, sliding_window=WINDOW,
            attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
            hidden_activation="gelu_pytorch_tanh", rope_theta=10000.0)),
        # Gemma 3: five local layers to one global, q/k norms, a local rotary base of its own and
        # linear rotary scaling on the global layers only.
        "gemma3": ("Gemma3TextConfig", "gemma3", dict(
            common, num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1,
            head_dim=64, query_pre_attn_scalar=64, sliding_window=WINDOW,
            rope_theta=1000000.0, rope_local_base_freq=10000.0,
            rope_scaling=dict(rope_type="linear", factor=8.0),
            hidden_activation="gelu_pytorch_tanh")),
        # For vLLM's tensor parallelism (python/pig_vllm/tests/test_tp.py): 2 kv-heads, so that
        # each of 2 ranks holds one, and a head dim vLLM's CPU kernels take (64).
        "llama_tp": ("LlamaConfig", "llama", dict(
            common, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, rope_theta=100000.0)),
        # Phi-3: fused qkv and gate/up projections, NEOX rotary layout.
        "phi3": ("Phi3Config", "phi3", dict(
            common, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
            rope_theta=10000.0, sliding_window=None, original_max_position_embeddings=4096,
            resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)),
    }


def copy_tokenizer(writer, src_path):
    """Copies every tokenizer.* key of the default model's GGUF file."""
    import gguf
    reader = gguf.GGUFReader(src_path)
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            etype = field.types[1]
            if etype == gguf.GGUFValueType.STRING:
                values = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                values = [field.parts[i][0].item() for i in field.data]
            writer.add_array(name, values)
        elif vtype == gguf.GGUFValueType.STRING:
            writer.add_string(name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            writer.add_key_value(name, field.parts[field.data[0]][0].item(), vtype)


def llama_permute(w, n_head):
    """llama.cpp's Q/K row order for the llama family: each head's two rotary halves interleaved,
    so that ggml's rotation of adjacent pairs equals transformers' rotate_half."""
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2)
            .reshape(w.shape))


def rope_theta(cfg):
    """The rotary base (transformers 5 keeps it in rope_parameters)."""
    theta = getattr(cfg, "rope_theta", None)
    return theta if theta is not None else cfg.rope_parameters["rope_theta"]


def llama3_rope_factors(cfg, head_dim):
    """The per-pair divisors llama.cpp stores as rope_freqs.weight for 'llama3' scaling."""
    rs = cfg.rope_scaling
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / (rope_theta(cfg) ** (i / head_dim))
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return out


def write_gguf(path, name, arch, cfg, model, tokenizer_gguf):
    import gguf
    import numpy as np

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(path, arch)
    a = arch + "."
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w.add_uint32(a + "block_count", cfg.num_hidden_layers)
    w.add_uint32(a + "context_length", cfg.max_position_embeddings)
    w.add_uint32(a + "embedding_length", cfg.hidden_size)
    w.add_uint32(a + "feed_forward_length", cfg.intermediate_size)
    w.add_uint32(a + "attention.head_count", cfg.num_attention_heads)
    w.add_uint32(a + "attention.head_count_kv", cfg.num_key_value_heads)
    w.add_uint32(a + "attention.key_length", hd)
    w.add_uint32(a + "attention.value_length", hd)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", cfg.rms_norm_eps)
    w.add_float32(a + "rope.freq_base", rope_theta(cfg))
    w.add_uint32(a + "rope.dimension_count", hd)
    window = getattr(cfg, "sliding_window", None)
    if window and (name != "qwen2" and name != "qwen3"):
        w.add_uint32(a + "attention.sliding_window", window)
    if name.startswith("gemma"):
        scale = 1.0 / math.sqrt(cfg.query_pre_attn_scalar)
        if abs(scale - 1.0 / math.sqrt(hd)) > 1e-9:
            w.add_float32(a + "attention.scale", scale)
    if name == "gemma2":
        w.add_float32(a + "attn_logit_softcapping", cfg.attn_logit_softcapping)
        w.add_float32(a + "final_logit_softcapping", cfg.final_logit_softcapping)
    if name == "gemma3":
        w.add_float32(a + "rope.freq_base_swa", cfg.rope_local_base_freq)
    rs = getattr(cfg, "rope_scaling", None) or {}
    if rs.get("rope_type") in ("linear", "yarn"):  # llama.cpp's keys
        w.add_string(a + "rope.scaling.type", rs["rope_type"])
        w.add_float32(a + "rope.scaling.factor", rs["factor"])
        if rs["rope_type"] == "yarn":
            w.add_uint32(a + "rope.scaling.original_context_length",
                         rs["original_max_position_embeddings"])
    copy_tokenizer(w, tokenizer_gguf)

    gemma = name.startswith("gemma")
    llama_family = arch == "llama"

    def norm(x):  # llama.cpp stores Gemma's (1 + w) norms with the 1 added
        return x + 1.0 if gemma else x

    def put(gguf_name, x, dtype=np.float32):
        w.add_tensor(gguf_name, np.ascontiguousarray(x.astype(dtype)))

    # The vocabulary-sized matrices as F16 (exact: make() rounded them), the rest F32.
    put("token_embd.weight", sd["model.embed_tokens.weight"], np.float16)
    put("output_norm.weight", norm(sd["model.norm.weight"]))
    if not cfg.tie_word_embeddings:
        put("output.weight", sd["lm_head.weight"], np.float16)
    if name == "llama3":
        put("rope_freqs.weight", np.array(llama3_rope_factors(cfg, hd), dtype=np.float32))
    for l in range(cfg.num_hidden_layers):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        put(b + "attn_norm.weight", norm(sd[p + "input_layernorm.weight"]))
        if name == "phi3":
            put(b + "attn_qkv.weight", sd[p + "self_attn.qkv_proj.weight"])
            put(b + "ffn_up.weight", sd[p + "mlp.gate_up_proj.weight"])
        else:
            q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
            if llama_family:
                q = llama_permute(q, cfg.num_attention_heads)
                k = llama_permute(k, cfg.num_key_value_heads)
            put(b + "attn_q.weight", q)
            put(b + "attn_k.weight", k)
            put(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"])
            for t in ("q", "k", "v"):
                if p + f"self_attn.{t}_proj.bias" in sd:
                    put(b + f"attn_{t}.bias", sd[p + f"self_attn.{t}_proj.bias"])
            put(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
            put(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        put(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        put(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"])
        if p + "self_attn.q_norm.weight" in sd:
            put(b + "attn_q_norm.weight", norm(sd[p + "self_attn.q_norm.weight"]))
            put(b + "attn_k_norm.weight", norm(sd[p + "self_attn.k_norm.weight"]))
        if gemma:
            put(b + "attn_post_norm.weight", norm(sd[p + "post_attention_layernorm.weight"]))
            put(b + "ffn_norm.weight", norm(sd[p + "pre_feedforward_layernorm.weight"]))
            put(b + "ffn_post_norm.weight", norm(sd[p + "post_feedforward_layernorm.weight"]))
        else:
            put(b + "ffn_norm.weight", norm(sd[p + "post_attention_layernorm.weight"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make(name, out, seed, tokenizer_gguf):
    import numpy as np
    import torch
    import transformers

    cls_name, arch, kwargs = architectures()[name]
    cfg = getattr(transformers, cls_name)(**kwargs)
    cfg._attn_implementation = "eager"  # soft-capping and windows as the model defines them
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.eval()
    # Norm weights (ones, or Gemma's zeros, at initialisation) and biases drawn too, so that a
    # norm or a bias read wrongly changes the logits.
    with torch.no_grad():
        for pname, prm in model.named_parameters():
            if "norm" in pname:
                prm.copy_(prm + 0.1 * torch.randn_like(prm))
            elif pname.endswith(".bias"):
                prm.copy_(0.2 * torch.randn_like(prm))
            elif "embed_tokens" in pname or "lm_head" in pname:
                prm.copy_(prm.half().float())  # stored as F16 in the GGUF file
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(os.path.join(d, "hf"))  # safetensors
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(3, VOCAB, (N_IDS,), generator=gen).tolist()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
    tmp = os.path.join(d, "model.gguf.tmp")
    write_gguf(tmp, name, arch, cfg, model, tokenizer_gguf)
    os.replace(tmp, os.path.join(d, "model.gguf"))
    with open(os.path.join(d, "ids.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    logits.astype(np.float32).tofile(os.path.join(d, "logits.bin"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"arch": arch, "transformers": transformers.__version__, "seed": seed}, f)
    size = os.path.getsize(os.path.join(d, "model.gguf"))
    print(f"{name}: {arch}, {cfg.num_hidden_layers} layers, {size / 2**20:.1f} MiB GGUF, "
          f"logits {logits.shape}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-gguf", required=True, help="the default model's GGUF file")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--arch", action="append",
                    help="only these (default: all but llama_tp, which the vLLM tests make)")
    ap.add_argument("--hf-tokenizer", help="copy this Hugging Face model's tokenizer files into "
                    "each hf/ (what vLLM loads)")
    ap.add_argument("--stamp", default=os.path.join(sys.prefix, ".parity.sha256"),
                    help="the file ./pig writes once the parity environment is installed")
    args = ap.parse_args()
    names = args.arch or [n for n in architectures() if n != "llama_tp"]
    for n in names:
        if n not in architectures():
            print(f"FAIL: unknown architecture {n!r} (known: {', '.join(architectures())})")
            return FAIL
    for n in names:  # an earlier run's files must not stand in for this one's
        for f in ("model.gguf", "logits.bin", "ids.txt"):
            try:
                os.remove(os.path.join(args.out, n, f))
            except FileNotFoundError:
                pass
    if os.environ.get("PIG_PARITY") == "0":
        print("SKIP: PIG_PARITY=0")
        return SKIP
    strict = in_ci() or os.path.exists(args.stamp)
    try:
        import torch
        import transformers  # noqa: F401
        import gguf  # noqa: F401
    except Exception as e:  # noqa: BLE001
        if strict:
            traceback.print_exc()
            print(f"FAIL: cannot import torch/transformers/gguf ({e!r}); ./pig test installs "
                  f"python/requirements-parity.txt, PIG_PARITY=0 skips deliberately")
            return FAIL
        print(f"SKIP: the parity environment is not installed ({e!r})")
        return SKIP
    if not os.path.exists(args.tokenizer_gguf):
        print(f"FAIL: {args.tokenizer_gguf} not found (./pig setup installs the default model)")
        return FAIL if strict else SKIP
    torch.set_num_threads(1)  # ctest runs this beside other tests
    for n in names:
        make(n, args.out, args.seed, args.tokenizer_gguf)
        if args.hf_tokenizer:
            import shutil
            for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                      "vocab.json", "merges.txt", "chat_template.jinja"):
                if os.path.exists(os.path.join(args.hf_tokenizer, f)):
                    shutil.copy(os.path.join(args.hf_tokenizer, f), os.path.join(args.out, n, "hf"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
