#!/usr/bin/env python3
"""Turns gpt2-bench --json lines into the Markdown table of docs/PERFORMANCE.md, or with
--compact into the shorter one of the README (runs at context 128 only), or with --sizes into the
table of the released sizes (bench/run_sizes.sh: one row per model, weight type and threads).

    python3 bench/table.py [--compact | --sizes] bench-results.jsonl
"""
import json
import sys


def main():
    args = sys.argv[1:]
    compact, sizes = "--compact" in args, "--sizes" in args
    args = [a for a in args if a not in ("--compact", "--sizes")]
    if len(args) != 1:
        sys.exit("usage: table.py [--compact | --sizes] RESULTS.jsonl")
    runs = [json.loads(line) for line in open(args[0], encoding="utf-8") if line.strip().startswith("{")]
    if sizes:
        print("| model | weights | threads | weights read MB/token | decode ms/token | limit ms | % of bandwidth limit | prefill tok/s | % of prefill limit | read GB/s | FMA GFLOP/s | peak RSS MB |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in runs:
            print(f"| {r['model'].replace('random-', '')} | {r['type']} | {r['threads']} | {r['weight_bytes_per_token'] / 1e6:.0f} | "
                  f"{r['decode_ms_per_token']:.2f} | {r['decode_limit_ms']:.2f} | {r['decode_pct_of_limit']:.0f}% | {r['prefill_tok_s']:.1f} | "
                  f"{r['prefill_pct_of_limit']:.0f}% | {r['bandwidth_gb_s']:.1f} | {r['fma_gflops']:.0f} | {r['peak_rss_mb']:.0f} |")
        return
    if compact:
        print("| weights | threads | decode ms/token | % of bandwidth limit | prefill tok/s | % of prefill limit |")
        print("|---|---|---|---|---|---|")
        for r in runs:
            if r["context"] == r["prompt_tokens"]:
                print(f"| {r['type']} | {r['threads']} | {r['decode_ms_per_token']:.2f} | {r['decode_pct_of_limit']:.0f}% | "
                      f"{r['prefill_tok_s']:.0f} | {r['prefill_pct_of_limit']:.0f}% |")
        return
    print("| weights | threads | context | KV | prefill tok/s | % of prefill limit | decode ms/token | limit ms | % of bandwidth limit | same, counting KV reads | read GB/s | FMA GFLOP/s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(f"| {r['type']} | {r['threads']} | {r['context']} | {'f16' if r['kv_f16'] else 'f32'} | {r['prefill_tok_s']:.0f} | "
              f"{r['prefill_pct_of_limit']:.0f}% | {r['decode_ms_per_token']:.2f} | {r['decode_limit_ms']:.2f} | "
              f"{r['decode_pct_of_limit']:.0f}% | {r['decode_pct_of_limit_with_kv']:.0f}% | {r['bandwidth_gb_s']:.1f} | {r['fma_gflops']:.0f} | {r['peak_rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
