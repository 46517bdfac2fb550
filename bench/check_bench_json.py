#!/usr/bin/env python3
"""Runs gpt2-bench on a tiny random model for about a second and checks its --json keys, and
that a bad option value is refused with a message naming it; then --grammar, --stage and --forks on a random model
of GPT-2's 124M shape, which carries GPT-2's vocabulary (a few seconds).

    python3 bench/check_bench_json.py path/to/gpt2-bench
"""
import json
import os
import subprocess
import sys
import tempfile

KEYS = ["type", "threads", "prompt_tokens", "prefill_tok_s", "decode_ms_per_token", "bandwidth_gb_s",
        "decode_pct_of_limit", "decode_pct_of_limit_with_kv", "prefill_pct_of_limit", "peak_rss_mb", "kernels"]
GRAMMAR_KEYS = ["grammar_mask_us_p50", "grammar_mask_us_p99", "grammar_mask_us_max", "grammar_compile_ms",
                "constrained_decode_ms_per_token", "forced_tokens_share", "sampled_decode_ms_per_token",
                "constrained_overhead_pct", "grammar_mask_steps"]
STAGE_KEYS = ["stage_tok_s", "stage_ttft_ms_p50", "stage_ttft_ms_p99", "stage_kv_bytes", "stage_rss_bytes",
              "frame_overrun_us_p99", "frame_overrun_us_max", "budget_tok_s", "budget_vs_whole_tok_s"]
FORK_KEYS = ["forks_rss_bytes", "forks_kv_bytes", "forks_own_cache_bytes", "forks_rss_vs_own_cache"]
BATCH_KEYS = ["batch", "decode_tok_s", "decode_ms_per_step", "decode_pct_of_fma_limit", "batch_limit_unit", "batch_limit_gops",
              "batch_roofline_tok_s", "batch_pct_of_roofline", "batch_roofline_bound"]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_bench_json.py GPT2_BENCH")
    for weight_type in ["f32", "q8_0"]:
        cmd = [sys.argv[1], "--random", "tiny", "--type", weight_type, "-t", "2", "--prompt", "16", "--gen", "8",
               "--repeat", "2", "--bandwidth-mb", "32", "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
        run = json.loads(out.stdout.strip().splitlines()[-1])
        missing = [k for k in KEYS if k not in run]
        if missing:
            sys.exit(f"missing keys {missing} in {run}")
        if run["type"] != weight_type or run["threads"] != 2:
            sys.exit(f"unexpected type/threads in {run}")
        print(json.dumps(run))
    # --batch B: B sessions decoding together, their keys added to the same object
    cmd = [sys.argv[1], "--random", "tiny", "--type", "q8_0", "-t", "2", "--prompt", "16", "--gen", "8",
           "--repeat", "2", "--bandwidth-mb", "32", "--batch", "3", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    run = json.loads(out.stdout.strip().splitlines()[-1])
    missing = [k for k in KEYS + BATCH_KEYS if k not in run]
    if missing:
        sys.exit(f"missing keys {missing} in {run}")
    if run["batch"] != 3 or run["decode_tok_s"] <= 0:
        sys.exit(f"unexpected batch/decode_tok_s in {run}")
    print(json.dumps(run))
    # --save writes llama.cpp's general.file_type of the weights (before: 0, "all F32", for q8_0)
    gguf_py = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "gguf.py")
    for weight_type, file_type in [("f32", 0), ("f16", 1), ("q8_0", 7), ("q4_0", 2)]:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "random.gguf")
            subprocess.run([sys.argv[1], "--random", "tiny", "--type", weight_type, "--save", path], check=True, capture_output=True, timeout=60)
            dump = subprocess.run([sys.executable, gguf_py, path], capture_output=True, text=True, timeout=60)
            if dump.returncode != 0:
                sys.exit(f"gguf.py {path}: {dump.stderr.strip()}")
            line = next((l for l in dump.stdout.splitlines() if "general.file_type" in l), "")
            if not line.rstrip().endswith(f" {file_type}"):
                sys.exit(f"--save --type {weight_type}: expected general.file_type {file_type}, got '{line.strip()}'")
    # --grammar: a constrained decode beside the free one, on GPT-2's vocabulary
    grammar = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "grammars", "json.gbnf")
    cmd = [sys.argv[1], "--random", "124M", "--type", "q8_0", "-t", "2", "--prompt", "4", "--gen", "4",
           "--repeat", "1", "--bandwidth-mb", "16", "--grammar", grammar, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    run = json.loads(out.stdout.strip().splitlines()[-1])
    missing = [k for k in KEYS + GRAMMAR_KEYS if k not in run]
    if missing:
        sys.exit(f"missing keys {missing} in {run}")
    if run["grammar_mask_steps"] != 8 or run["constrained_decode_ms_per_token"] <= 0:
        sys.exit(f"expected 8 masks (warm-up and one round of 4 tokens) in {run}")
    print(json.dumps(run))
    # --stage: a scene of 3 characters on a stage, stepped whole and under a frame budget
    cmd = [sys.argv[1], "--random", "124M", "--type", "q8_0", "-t", "2", "--stage", "3", "--scene-tokens", "8",
           "--answer-tokens", "3", "--arrival-ms", "1", "--stage-budget", "2000", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    run = json.loads(out.stdout.strip().splitlines()[-1])
    missing = [k for k in STAGE_KEYS if k not in run]
    if missing:
        sys.exit(f"missing keys {missing} in {run}")
    if run["stage_tokens"] != 9 or run["budget_tokens"] != 9 or run["stage_kv_bytes"] <= 0:
        sys.exit(f"expected 3 answers of 3 tokens, whole and budgeted, in {run}")
    print(json.dumps(run))
    # --forks: the memory of 4 forks of a scene of 128 tokens, then 20 tokens each
    cmd = [sys.argv[1], "--random", "124M", "--type", "q8_0", "-t", "2", "--forks", "4", "--scene-tokens", "128",
           "--own-tokens", "20", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    run = json.loads(out.stdout.strip().splitlines()[-1])
    missing = [k for k in FORK_KEYS if k not in run]
    if missing:
        sys.exit(f"missing keys {missing} in {run}")
    own = 4 * 20 * 2 * 12 * 768 * 2  # 4 x 20 positions of 12 layers' keys and values, 768 wide, f16
    if run["forks_own_cache_bytes"] != own or not 0 < run["forks_kv_bytes"] < 4 * (128 + 20) * own / 80:
        sys.exit(f"expected the cache of 4 x 20 tokens ({own} bytes) and the forks holding less than 4 copies of the scene in {run}")
    print(json.dumps(run))
    bad = [sys.argv[1], "--random", "124M", "--vocab", os.path.join(os.path.dirname(grammar), "no-such-folder")]
    out = subprocess.run(bad, capture_output=True, text=True, timeout=60)
    if out.returncode != 1 or "--vocab" not in out.stderr:
        sys.exit(f"{' '.join(bad)}: expected exit 1 and a message naming --vocab, got {out.returncode}: {out.stderr.strip()}")
    bad = [sys.argv[1], "--random", "tiny", "--bandwidth-mb", "0"]
    out = subprocess.run(bad, capture_output=True, text=True, timeout=60)
    if out.returncode != 2 or "bandwidth-mb" not in out.stderr:
        sys.exit(f"{' '.join(bad)}: expected exit 2 and a message naming bandwidth-mb, got {out.returncode}: {out.stderr.strip()}")


if __name__ == "__main__":
    main()
