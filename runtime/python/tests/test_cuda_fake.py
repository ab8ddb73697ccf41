# SPDX-License-Identifier: MIT
"""A cuda-backend kvmmd over kvmm's fake CUDA driver (tests/fakecuda/, no GPU needed): the
package sees a pool in GPU memory for what it is.  The CUDA tensors themselves need a CUDA
build of torch and a GPU: not tested here."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import NS_A, PKG, Daemon

FAKE = os.path.join(os.path.dirname(os.environ.get("KVMM_KVMMD") or
                                    os.path.join(PKG, "..", "..", "kvmm", "kvmmd")),
                    "..", "tests", "fakecuda", "libcuda-fake.so")

_CODE = r"""
import errno, sys
sys.path.insert(0, {pkg!r})
import kvmm
fmt = kvmm.Format(2, 2, 64, "fp16")
mode = {mode!r}
try:
    c = kvmm.attach({sock!r}, {ns!r}, fmt)
except kvmm.KvmmError as e:
    print("attach-error", e.errno, e.strerror)
    raise SystemExit(0)
print("backend", c.backend)
if mode == "gpu":
    d0, d3 = c.frame_devptr(0), c.frame_devptr(3)
    assert d0 and d3 == d0 + 3 * c.page_size
    try:
        c.frame_addr(0)
    except kvmm.KvmmError as e:
        assert e.errno == errno.EOPNOTSUPP
    try:
        c.views("numpy")
    except ValueError as e:
        print("numpy-views", e)
else:
    try:
        c.views()
    except ValueError as e:
        print("no-views", e)
s = c.seq_create()
c.seq_append(s, range(40))
print("table", c.block_table([s], 4, like="numpy").tolist())
c.close()
"""


@pytest.fixture(scope="module")
def cuda_daemon():
    fake = os.path.normpath(FAKE)
    if not os.path.exists(fake):
        pytest.skip("no fake CUDA driver (a build without CONFIG_KVMM_CUDA)")
    old = os.environ.get("KVMM_LIBCUDA")
    os.environ["KVMM_LIBCUDA"] = fake
    try:
        d = Daemon(["--backend", "cuda"])
    except RuntimeError as e:
        # the fake driver is built in every configuration, the cuda backend only with CUDA
        if "built without CUDA" in str(e):
            pytest.skip("kvmmd was built without the cuda backend (CONFIG_KVMM_CUDA=n)")
        raise
    finally:
        if old is None:
            del os.environ["KVMM_LIBCUDA"]
        else:
            os.environ["KVMM_LIBCUDA"] = old
    yield d, fake
    log = d.log_text()
    assert d.stop() == 0, log


def run(sock: str, fake: str, mode: str, **env: str) -> str:
    e = dict(os.environ, KVMM_LIBCUDA=fake, PYTHONDONTWRITEBYTECODE="1", **env)
    e.pop("KVMM_CUDA_DEVICE", None)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", _CODE.format(pkg=PKG, sock=sock, ns=NS_A,
                                                            mode=mode)],
                       env=e, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_pool_in_gpu_memory(cuda_daemon):
    d, fake = cuda_daemon
    out = run(d.sock, fake, "gpu")
    assert "backend cuda" in out
    assert "numpy-views a pool in GPU memory has only torch views" in out
    assert "table [[" in out


def test_process_without_a_device(cuda_daemon):
    d, fake = cuda_daemon
    out = run(d.sock, fake, "none", KVMM_CUDA_DEVICE="none")
    assert "backend none" in out and "no-views" in out and "table [[" in out


def test_no_driver_says_why(cuda_daemon):
    d, _ = cuda_daemon
    out = run(d.sock, "/nonexistent/libcuda.so.1", "gpu")
    assert out.startswith("attach-error 19 ")  # ENODEV, with kvmm_cuda_map_why's words
    assert "libcuda" in out or "driver" in out
