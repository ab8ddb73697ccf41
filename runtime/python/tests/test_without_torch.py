# SPDX-License-Identifier: MIT
"""Without torch: the calls, numpy views and numpy block tables still work."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import NS_A, PKG

pytest.importorskip("numpy")

_CODE = r"""
import sys
sys.modules["torch"] = None  # import torch now fails, as if it were not installed
import numpy as np
import kvmm
c = kvmm.attach({sock!r}, {ns!r}, kvmm.Format(2, 2, 64, "fp16"))
s = c.seq_create()
c.seq_append(s, np.arange(40, dtype=np.uint32))
t = c.block_table([s], 4, like="numpy")
v = c.views("numpy")
v.k[1][t[0, 0], 3, 1, :] = 2.5
assert float(v.k[1][t[0, 0], 3, 1, 5]) == 2.5
try:
    c.views("torch")
except ImportError:
    pass
else:
    raise SystemExit("torch views without torch")
try:
    c.block_table([s], 4)
except ImportError:
    pass
else:
    raise SystemExit("torch table without torch")
print("ok", t.tolist())
"""


def test_numpy_only(daemon):
    env = dict(os.environ, PYTHONPATH=PKG, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-c", _CODE.format(sock=daemon.sock, ns=NS_A)],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok [[")
