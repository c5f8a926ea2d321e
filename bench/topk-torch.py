#!/usr/bin/env python3
"""topk-torch.py: torch.topk(k=512) over 256k float32 candidates on the GPU, the anchor
bench/indexer-decode's dsv4_cuda_topk is compared with (median of 30 calls, CUDA events,
after a warm-up; and per call of 30 back-to-back calls, the median of 5 such runs; batch 1
to 64, as in indexer-decode)."""
import torch

N, K, REPS = 256 * 1024, 512, 30


def median_us(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return sorted(times)[REPS // 2]


def stream_us(fn):
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(REPS):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / REPS)
    return sorted(times)[2]


def main():
    print(f"| top-k | candidates | batch | time (us) | back-to-back (us) |  <!-- torch "
          f"{torch.__version__}, {torch.cuda.get_device_name(0)} -->")
    print("|---|---|---|---|---|")
    for batch in (1, 2, 4, 8, 16, 32, 64):
        x = torch.randn(batch, N, device="cuda", dtype=torch.float32)
        def step():
            torch.topk(x, K, dim=1, largest=True, sorted=True)
        us, b2b = median_us(step), stream_us(step)
        print(f"| torch.topk k=512 sorted | 256k | {batch} | {us:.1f} | {b2b:.1f} |")


if __name__ == "__main__":
    main()
