# SPDX-License-Identifier: MIT
"""The complete example of Documentation/userspace-api/python.md runs as written."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import NS_A, PKG, TREE

pytest.importorskip("torch")
DOC = os.path.join(TREE, "Documentation", "userspace-api", "python.md")


def example() -> str:
    with open(DOC) as f:
        text = f.read()
    section = text.split("## A complete example", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_example_runs_and_reuses_its_prefix(daemon):
    from kvmm import kernels
    if not kernels.available("cpu"):
        pytest.skip("this libkvmm has no CPU kernels")
    env = dict(os.environ, KVMM_SOCKET=daemon.sock, KVMM_NS=NS_A, PYTHONPATH=PKG,
               PYTHONDONTWRITEBYTECODE="1")
    runs = [subprocess.run([sys.executable, "-c", example()], env=env, capture_output=True,
                           text=True, timeout=120) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout.startswith("prefix hit 0 of 53 tokens; decoded, out [1, 4, 64]")
    assert runs[1].stdout.startswith("prefix hit 48 of 53 tokens")
