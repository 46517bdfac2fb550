#!/usr/bin/env python3
"""Times Hugging Face transformers' GPT-2 generate() (KV cache, fp16, CUDA) on a model with
random weights built from a GPT2Config (no download), for comparison with gpt2-bench-cuda.

Prints ms per generated token over --new tokens after a --prompt token prompt, sampling with
nanoGPT's defaults (temperature 0.8, top_k 200), as gpt2-bench-cuda's decode measurement does.
"""
import argparse
import json
import sys
import time

SHAPES = {"124M": (12, 12, 768), "355M": (24, 16, 1024), "774M": (36, 20, 1280), "1558M": (48, 25, 1600)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="124M", choices=sorted(SHAPES), help="GPT-2 size to build (default 124M)")
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens (default 16)")
    parser.add_argument("--new", type=int, default=128, help="tokens to generate and time (default 128)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the median is reported (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        sys.exit(f"hf_generate: {e}")
    if not torch.cuda.is_available():
        sys.exit("hf_generate: no CUDA GPU visible to torch")
    n_layer, n_head, n_embd = SHAPES[args.shape]
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_positions=1024, vocab_size=50257)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = GPT2LMHeadModel(config)
    model = model.half().eval()
    ids = torch.randint(0, 50257, (1, args.prompt), device="cuda")
    kwargs = dict(do_sample=True, temperature=0.8, top_k=200, use_cache=True, pad_token_id=0)
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=8, min_new_tokens=8, **kwargs)
        times = []
        for _ in range(args.repeat):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=args.new, min_new_tokens=args.new, **kwargs)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    new = out.shape[1] - args.prompt
    ms = sorted(times)[len(times) // 2] / new * 1e3
    result = {"impl": "transformers", "version": __import__("transformers").__version__, "torch": torch.__version__, "shape": args.shape,
              "dtype": "fp16", "prompt_tokens": args.prompt, "new_tokens": new, "decode_ms_per_token": round(ms, 4)}
    print(json.dumps(result) if args.json else f"transformers {args.shape} fp16 generate: {ms:.3f} ms/token")


if __name__ == "__main__":
    main()
