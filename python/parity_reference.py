#!/usr/bin/env python3
"""Reference outputs from Hugging Face transformers (CPU torch + gguf) for pig's parity tests.

transformers loads the same GGUF file (dequantised to float32) as an independent
implementation. This script writes into --out:
  tokens.txt   one line per corpus text: <hex of the UTF-8 text> <token ids...>
  logits_ids.txt, logits.bin   the first 64 token ids of a real text and the float32 logits
                               (64 x vocab, row-major) transformers computes for them
  greedy.txt   per prompt: <hex of the prompt> | <prompt ids> | <32 greedy ids>
  chat.txt     per message: <hex of the user message> <hex of the rendered chat template>

Skips (exit code 77, ctest's "skipped") only when PIG_PARITY=0, or when the parity environment
was never installed (no stamp file from ./pig's setup_parity) and CI is not set. Everywhere else,
that is when CI=true or once the environment is installed, anything that goes wrong (an import
error of torch, numpy or transformers, a missing model, a missing chat template) is a failure with
the exception text: a broken install must not turn the parity suite into skips.
"""
import argparse
import os
import sys
import time
import traceback

SKIP = 77
FAIL = 1
OUTPUTS = ["tokens.txt", "chat.txt", "logits_ids.txt", "logits.bin", "greedy.txt"]


def in_ci():
    return os.environ.get("CI", "").lower() in ("true", "1")

CORPUS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\t\ttabs, newlines\n\n\nand\r\nCRLF",
    "many     spaces      between\n    indented line",
    "I'm sure they'll say it's fine; we've done what we'd planned. DON'T SHOUT'S",
    "numbers: 0 7 42 1234567 3.14159 -12e5 1,000,000 2024-11-29",
    "Unicode: café naïve façade — “quotes” ‘single’ … ©®™",
    "中文字符测试，日本語のテキスト、한국어 텍스트",
    "Русский текст и ελληνικά γράμματα, עברית, العربية",
    "emoji 🙂🚀👍🏽 and symbols ∑∫√∞ ≠ ≤ ≥ µ",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot product",
    "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text after end<|im_end|><|im_start|>",
    "x<|im_start|>y <|im_end|> z",
    "mixed123abc456  ###!!! ???...",
    "   \n\t  \n",
    "a",
    "URL https://example.com/path?q=1&r=two#frag and email a.b@c.de",
    "Ünïcödé ÀÉÎÕÜ ﬁ ligature ½ ² ³ Ⅻ ٣ ໓",
]

LOGITS_TEXT = (
    "The Industrial Revolution, which began in Great Britain in the late eighteenth century, "
    "transformed the way goods were produced. Before it, most manufacturing was done by hand "
    "in homes or small workshops. The introduction of steam power, mechanised textile "
    "production and new methods of making iron changed economies and societies across the "
    "world, and cities grew rapidly as people moved to work in the new factories."
)

GREEDY_PROMPTS = [
    "The capital of France is",
    "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n",
    "<|im_start|>user\nWhat is the boiling point of water?<|im_end|>\n<|im_start|>assistant\n",
]
N_LOGITS = 64
N_GREEDY = 32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stamp", default=os.path.join(sys.prefix, ".parity.sha256"),
                    help="the file ./pig writes once the parity environment is installed")
    args = ap.parse_args()
    # Outputs of an earlier run must not stand in for this one's.
    for name in OUTPUTS:
        try:
            os.remove(os.path.join(args.out, name))
        except FileNotFoundError:
            pass
    if os.environ.get("PIG_PARITY") == "0":
        print("SKIP: PIG_PARITY=0")
        return SKIP
    installed = os.path.exists(args.stamp)
    strict = in_ci() or installed
    why = ("CI=true" if in_ci() else f"the parity environment is installed ({args.stamp})")
    if not os.path.exists(args.model):
        if strict:
            print(f"FAIL: model not found: {args.model} ({why}; ./pig setup installs it)")
            return FAIL
        print(f"SKIP: model not found: {args.model} (./pig setup installs it)")
        return SKIP
    try:
        import numpy as np
        import torch
        import transformers
        from tokenizers import pre_tokenizers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except Exception as e:  # noqa: BLE001 - reported below, with the traceback when it counts
        if strict:
            traceback.print_exc()
            print(f"FAIL: the parity reference cannot import torch/transformers ({e!r}) although "
                  f"{why}; reinstall python/requirements-parity.txt (./pig test), or set "
                  f"PIG_PARITY=0 to skip the parity tests deliberately")
            return FAIL
        print(f"SKIP: the parity environment is not installed ({e!r}): ./pig test installs "
              f"python/requirements-parity.txt (with CI=true this fails)")
        return SKIP

    # One thread: ctest runs this beside other tests, and torch's threads spinning against them
    # took 153 s on 2 cores where one thread takes 22 s (alone, 1 or 2 threads take the same).
    torch.set_num_threads(1)
    t0 = time.time()
    d, name = os.path.split(os.path.abspath(args.model))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    # transformers' GGUF converter builds a plain GPT-2 byte-level pre-tokenizer. SmolLM2's own
    # tokenizer (tokenizer.ggml.pre = "smollm") first isolates every digit; restore that so the
    # reference is the model's real tokenizer.
    from gguf import GGUFReader

    reader = GGUFReader(args.model)
    pre = reader.fields.get("tokenizer.ggml.pre")
    pre_name = bytes(pre.parts[pre.data[0]]).decode() if pre else ""
    if pre_name == "smollm":
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            ]
        )

    def encode(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tokens.txt"), "w") as f:
        for text in CORPUS:
            f.write(text.encode().hex() + " " + " ".join(map(str, encode(text))) + "\n")

    if not getattr(tok, "chat_template", None):
        raise RuntimeError("transformers found no chat template in the GGUF file "
                           "(tokenizer.chat_template), so ChatTemplateMatchesTransformers has no "
                           "reference")
    with open(os.path.join(args.out, "chat.txt"), "w") as f:
        for msg in ["Hi", "What is the boiling point of water?\nAnswer briefly."]:
            rendered = tok.apply_chat_template(
                [{"role": "user", "content": msg}], add_generation_prompt=True, tokenize=False
            )
            f.write(msg.encode().hex() + " " + rendered.encode().hex() + "\n")

    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, torch_dtype=torch.float32)
    if not any(t.name == "output.weight" for t in reader.tensors):
        # Tied embeddings: transformers 4.46 leaves lm_head randomly initialised for a GGUF
        # without output.weight; tie it to the token embedding as the model intends.
        model.lm_head.weight = model.model.embed_tokens.weight
    model.eval()
    print(f"loaded transformers {transformers.__version__} torch {torch.__version__} "
          f"in {time.time() - t0:.1f} s")

    ids = encode(LOGITS_TEXT)[:N_LOGITS]
    assert len(ids) == N_LOGITS, len(ids)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
    with open(os.path.join(args.out, "logits_ids.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    logits.astype(np.float32).tofile(os.path.join(args.out, "logits.bin"))

    with open(os.path.join(args.out, "greedy.txt"), "w") as f:
        for prompt in GREEDY_PROMPTS:
            p = encode(prompt)
            out = []
            with torch.no_grad():
                res = model(torch.tensor([p]), use_cache=True)
                past = res.past_key_values
                nxt = int(res.logits[0, -1].argmax())
                for _ in range(N_GREEDY):
                    out.append(nxt)
                    res = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                    past = res.past_key_values
                    nxt = int(res.logits[0, -1].argmax())
            f.write(prompt.encode().hex() + " | " + " ".join(map(str, p)) + " | " +
                    " ".join(map(str, out)) + "\n")
    print(f"reference written to {args.out} in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
