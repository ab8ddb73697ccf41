#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tools/bench_python.py - what the Python package costs an engine per step, against C.

One engine step's batch calls for NR_SEQS sequences (pin, block table into an int32 tensor,
unpin) timed from Python (kvmm.Client) and from C (tools/kvmm-step-bench, libkvmm directly)
against the same kvmmd in the same run; the ratio Python / C is the package's overhead (the
target is at most 2x).  Then one layer's paged decode over those sequences, through
kvmm.kernels.paged_decode on the pool's views and through kvmm_cpu_paged_decode from C.
Also: the one-time cost of building a 32-layer pool's views, and the per-step cost of
getting them again (cached on the handle).

    /usr/bin/python3 tools/bench_python.py [--seqs 64] [--blocks 8] [--steps 2000]
                                           [--decode-steps 200] [--repeats 9]

Run from the top of a built tree (make): it starts kvmm/kvmmd in a temporary directory and
uses runtime/libkvmm.so.  Each round runs the C side (a fresh kvmm-step-bench) and then the
Python side; each figure is the median over the rounds, each ratio the median of the rounds'
ratios.
"""
from __future__ import annotations

import argparse
import array
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

TREE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(TREE, "runtime", "python"))
os.environ.setdefault("KVMM_LIB", os.path.join(TREE, "runtime", "libkvmm.so"))

import kvmm  # noqa: E402

PAGE_SIZE = 16384


def start_daemon(tmp: str, frames: int) -> tuple[subprocess.Popen, str]:
    sock = os.path.join(tmp, "kvmmd.sock")
    conf = os.path.join(tmp, "kvmmd.conf")
    open(conf, "w").close()
    log = open(os.path.join(tmp, "kvmmd.log"), "wb")
    p = subprocess.Popen([os.path.join(TREE, "kvmm", "kvmmd"), "--foreground", "--config",
                          conf, "--socket", sock, "--page-size", str(PAGE_SIZE), "--frames",
                          str(frames), "--namespace", f"bench:{frames}"],
                         stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        if p.poll() is not None or time.monotonic() > deadline:
            sys.exit("bench_python: kvmmd did not start (see its log in " + tmp + ")")
        time.sleep(0.01)
    return p, sock


def c_side(sock: str, a: argparse.Namespace) -> tuple[list[float], list[float]]:
    out = subprocess.run([os.path.join(TREE, "tools", "kvmm-step-bench"), sock, "bench",
                          str(a.seqs), str(a.blocks), str(a.steps), str(a.repeats),
                          str(a.decode_steps)], capture_output=True, text=True)
    if out.returncode != 0 or "c_ok" not in out.stdout:
        sys.exit(f"bench_python: kvmm-step-bench failed: {out.stderr.strip()}")

    def rows(key: str) -> list[float]:
        return [float(l.split()[1]) for l in out.stdout.splitlines() if l.startswith(key)]
    return rows("c_step_ns"), rows("c_decode_ns")


def py_decode(pool, q, table, ctx, out, a: argparse.Namespace) -> list[float]:
    from kvmm import kernels
    res = []
    for _ in range(a.repeats):
        t0 = time.perf_counter_ns()
        for _ in range(a.decode_steps):
            kernels.paged_decode(pool, 0, q, table, ctx, out=out)
        res.append((time.perf_counter_ns() - t0) / a.decode_steps)
    return res


def py_side(c: kvmm.Client, seqs, table, a: argparse.Namespace) -> list[float]:
    res = []
    pin, bt, unpin = c.pin, c.block_table, c.unpin
    for _ in range(a.repeats):
        t0 = time.perf_counter_ns()
        for _ in range(a.steps):
            pin(seqs)
            bt(seqs, out=table)
            unpin(seqs)
        res.append((time.perf_counter_ns() - t0) / a.steps)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--decode-steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=9, help="rounds")
    a = ap.parse_args()
    import torch

    frames = 2 * a.seqs * a.blocks + 64
    with tempfile.TemporaryDirectory(prefix="kvmm-benchpy.") as tmp:
        d, sock = start_daemon(tmp, frames)
        try:
            fmt = kvmm.Format(layers=2, kv_heads=2, head_dim=64, dtype="fp16")
            with kvmm.attach(sock, "bench", fmt) as c:
                tpp = c.tokens_per_page
                seq_list = [c.seq_create() for _ in range(a.seqs)]
                for s in seq_list:
                    c.seq_append(s, [0] * (tpp * a.blocks))
                seq_arr = array.array("Q", seq_list)
                table = torch.empty((a.seqs, a.blocks), dtype=torch.int32)
                py_side(c, seq_arr, table, argparse.Namespace(repeats=1, steps=200))  # warm
                pool = c.views()
                q = torch.tensor([(i % 7) * 0.125 for i in range(a.seqs * 4 * 64)],
                                 dtype=torch.float32).view(a.seqs, 4, 64)
                ctx = torch.full((a.seqs,), a.blocks * tpp, dtype=torch.int32)
                out = torch.empty_like(q)
                # rounds interleave C and Python, so that a change of load on a shared machine
                # hits both sides of a round's ratios alike
                one = argparse.Namespace(**{**vars(a), "repeats": 1})
                rounds = []
                for _ in range(a.repeats):
                    (cs,), (cd,) = c_side(sock, one)
                    (pl,) = py_side(c, seq_list, table, one)
                    (pa,) = py_side(c, seq_arr, table, one)
                    # the table is right: every row full, the frames the daemon gave
                    assert int((table >= 0).sum()) == a.seqs * a.blocks
                    (pd,) = py_decode(pool, q, table, ctx, out, one)
                    rounds.append((cs, pl, pa, cd, pd))
                del pool
            big = kvmm.Format(layers=32, kv_heads=1, head_dim=64, dtype="fp16")
            with kvmm.attach(sock, "bench", big) as c:
                t0 = time.perf_counter_ns()
                v = c.views()
                build = time.perf_counter_ns() - t0
                t0 = time.perf_counter_ns()
                for _ in range(10000):
                    v = c.views()
                again = (time.perf_counter_ns() - t0) / 10000
                del v
        finally:
            d.send_signal(signal.SIGTERM)
            d.wait(10)

    def med(i: int) -> float:
        return statistics.median(r[i] for r in rounds)

    def ratio(i: int, j: int) -> float:
        return statistics.median(r[i] / r[j] for r in rounds)

    print(f"engine step: pin + block table + unpin, {a.seqs} sequences x {a.blocks} blocks, "
          f"{a.steps} steps per round, {a.repeats} rounds (medians over the rounds)")
    print(f"  C (libkvmm)                      {med(0) / 1000:9.2f} us/step")
    print(f"  Python, seqs as array.array('Q') {med(2) / 1000:9.2f} us/step   "
          f"{ratio(2, 0):5.2f}x C")
    print(f"  Python, seqs as a list of ints   {med(1) / 1000:9.2f} us/step   "
          f"{ratio(1, 0):5.2f}x C")
    print(f"paged decode, one layer, {a.seqs} sequences x {a.blocks * tpp} tokens, 4 query "
          f"heads over 2 KV heads of 64, fp16 ({a.decode_steps} calls per round)")
    print(f"  C (kvmm_cpu_paged_decode)        {med(3) / 1000:9.2f} us/call")
    print(f"  Python (kvmm.kernels, on views)  {med(4) / 1000:9.2f} us/call   "
          f"{ratio(4, 3):5.2f}x C")
    print("views of a 32-layer pool (64 tensors)")
    print(f"  built once                       {build / 1000:9.1f} us")
    print(f"  client.views() per step after    {again / 1000:9.3f} us (cached)")


if __name__ == "__main__":
    main()
