"""Convert a GGUF model into a Hugging Face checkpoint that vLLM's CPU engine loads.

vLLM 0.32 cannot load GGUF on the CPU. transformers reads the GGUF file, dequantizes every weight
(GgufConfig(dequantize=True)) and writes a plain bf16 checkpoint with its tokenizer. The quantizer
marker is dropped before saving: left in, the saved config.json would claim a GGUF quantization
that vLLM then tries (and fails) to apply.

    python convert_model.py MODEL.gguf OUT_DIR

Idempotent: writes OUT_DIR.tmp, then renames it; an existing OUT_DIR with its stamp is left alone.
Run with the vLLM environment's Python (.venv-vllm; ./pig vllm-setup does).
"""
import os
import shutil
import sys
import time

STAMP = ".pig-converted"


def convert(gguf: str, out: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    src_dir, name = os.path.split(os.path.abspath(gguf))
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(
        src_dir, gguf_file=name, quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    # The weights are plain tensors now; forget that they came through a quantizer.
    for obj, attr in ((model.config, "quantization_config"), (model, "hf_quantizer")):
        if hasattr(obj, attr):
            try:
                delattr(obj, attr)
            except AttributeError:
                setattr(obj, attr, None)
    for attr in ("is_quantized", "quantization_method"):
        if getattr(model, attr, None):
            try:
                setattr(model, attr, False if attr == "is_quantized" else None)
            except AttributeError:
                pass
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    with open(os.path.join(tmp, STAMP), "w") as f:
        f.write(os.path.abspath(gguf) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    gguf, out = sys.argv[1:]
    if os.path.isfile(os.path.join(out, STAMP)):
        return 0
    start = time.monotonic()
    convert(gguf, out)
    print(f"converted {gguf} -> {out} in {time.monotonic() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
