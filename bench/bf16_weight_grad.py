#!/usr/bin/env python3
"""A bf16 weight gradient summed in float32, dw += x^T dy, three ways on this CPU, interleaved:
libtorch's bf16 product (oneDNN) plus a float32 add (what kernels::accumulate_weight_grad does
without MKL), MKL's cblas_gemm_bf16bf16f32 accumulating into dw (what it does on Intel CPUs), and
the float32 addmm for scale. Decides where lib/kernels/cpu/bf16_gemm.cpp calls MKL.

    .venv-torch2/bin/python bench/bf16_weight_grad.py [--threads 2] [--rounds 5]

Shapes: the 10.7M config's layers (16384 rows of width 384 and 1536) and GPT-2's head chunk
(rows x 768 x 50304). Prints the CPU, each shape's best time per way, and the ratios.
"""
import argparse
import ctypes
import os
import time

import torch

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
SHAPES = [(16384, 384, 1536), (16384, 1536, 384), (16384, 384, 1152), (4096, 384, 128), (1024, 768, 50304)]


def mkl_gemm():
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    fn = lib.cblas_gemm_bf16bf16f32
    fn.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                       ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    return fn


def cpu_line():
    info = open("/proc/cpuinfo").read().splitlines()
    field = lambda k: next((l.split(":", 1)[1].strip() for l in info if l.startswith(k)), "?")
    flags = field("flags").split()
    bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return f"{field('vendor_id')} {field('model name')} (family {field('cpu family')} model {field('model')}); bf16: {', '.join(bf16) or 'none'}"


def best_ms(fn, rounds):
    fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gemm = mkl_gemm()
    print(f"CPU: {cpu_line()}; {args.threads} threads; torch {torch.__version__}\n")
    print("| rows x K x N | oneDNN bf16 mm + fp32 add ms | MKL gemm_bf16bf16f32 ms | fp32 addmm ms | MKL / oneDNN | max abs diff |")
    print("|---|---|---|---|---|---|")
    for rows, K, N in SHAPES:
        x = torch.randn(rows, K).bfloat16()
        dy = torch.randn(rows, N).bfloat16()
        xf, dyf = x.float(), dy.float()
        dw_aten, dw_mkl, dw_fp32 = torch.zeros(K, N), torch.zeros(K, N), torch.zeros(K, N)

        def aten():
            dw_aten.add_(torch.mm(x.t(), dy))

        def mkl():
            gemm(ROW_MAJOR, TRANS, NO_TRANS, K, N, rows, 1.0, x.data_ptr(), K, dy.data_ptr(), N, 1.0,
                 dw_mkl.data_ptr(), N)

        def fp32():
            dw_fp32.addmm_(xf.t(), dyf)

        times = {"aten": [], "mkl": [], "fp32": []}
        for _ in range(2):  # interleaved: a neighbour's load falls on all three alike
            for name, fn in (("aten", aten), ("mkl", mkl), ("fp32", fp32)):
                times[name].append(best_ms(fn, args.rounds))
        t = {k: min(v) for k, v in times.items()}
        # Both sums hold the same number of products; MKL's are unrounded, so they differ by bf16 rounding.
        diff = (dw_aten - dw_mkl).abs().max().item()
        print(f"| {rows} x {K} x {N} | {t['aten']:.1f} | {t['mkl']:.1f} | {t['fp32']:.1f} | "
              f"{t['mkl'] / t['aten']:.2f} | {diff:.2e} |")


if __name__ == "__main__":
    main()
