# SPDX-License-Identifier: MIT
"""pytest fixtures: a real kvmmd per test module, in a temporary directory, like
tests/integration/itest.c (host backend, two namespaces, 16 KiB pages).

$KVMM_KVMMD names the daemon (default: the tree's kvmm/kvmmd); $KVMM_LIB the libkvmm.so the
package loads (default: the tree's runtime/libkvmm.so).  When KVMM_CMOCKA_SUMMARY is set (the
make check wrapper tests/integration/itest_python sets it) the session ends with cmocka's
summary lines, which scripts/run-tests.sh counts.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
TREE = os.path.normpath(os.path.join(PKG, "..", ".."))
sys.path.insert(0, PKG)

PAGE_SIZE = 16384
NS_A, NS_A_FRAMES = "alpha", 256
NS_B, NS_B_FRAMES = "beta", 64


def kvmmd_path() -> str:
    return os.environ.get("KVMM_KVMMD") or os.path.join(TREE, "kvmm", "kvmmd")


def stop_process(pid: int, timeout: float = 5.0) -> None:
    """SIGSTOP @pid and wait until every one of its threads is stopped: kill() returns before
    a thread running on another CPU (a ring worker spinning for work) has stopped, and such a
    thread may still answer a call made meanwhile (itest_reattach.c's stop_daemon does the
    same)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except (FileNotFoundError, IndexError):
                continue
        if states and all(s in ("T", "t") for s in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid}: threads not stopped after {timeout} s: {states}")
        time.sleep(0.001)


class Daemon:
    """A kvmmd in a temporary directory; ``sock`` is its socket."""

    def __init__(self, extra: list[str] | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="kvmm-pytest.")
        self.sock = os.path.join(self.dir, "kvmmd.sock")
        self.log = os.path.join(self.dir, "kvmmd.log")
        conf = os.path.join(self.dir, "kvmmd.conf")
        open(conf, "w").close()
        argv = [kvmmd_path(), "--foreground", "--config", conf, "--socket", self.sock,
                "--page-size", str(PAGE_SIZE), "--frames", str(NS_A_FRAMES + NS_B_FRAMES),
                "--namespace", f"{NS_A}:{NS_A_FRAMES}", "--namespace", f"{NS_B}:{NS_B_FRAMES}"]
        argv += extra or []
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        # the socket file exists from bind(), before listen(): wait for a connect that works
        while not self._accepts():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log_text()  # read before stop() removes the directory
                self.stop()
                raise RuntimeError(f"kvmmd did not start:\n{log}")
            time.sleep(0.01)

    def _accepts(self) -> bool:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # as kvmmd listens
        try:
            s.connect(self.sock)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def log_text(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> int:
        """SIGTERM, wait, clean up; the daemon's exit status."""
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)
        return rc


@pytest.fixture(scope="module")
def daemon():
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip(f"kvmmd not built at {kvmmd_path()} (or set KVMM_KVMMD)")
    d = Daemon()
    yield d
    log = d.log_text()
    rc = d.stop()
    assert rc == 0, f"kvmmd exited with {rc}:\n{log}"


@pytest.fixture
def fmt():
    import kvmm
    return kvmm.Format(layers=2, kv_heads=2, head_dim=64, dtype="fp16")


@pytest.fixture
def client(daemon, fmt):
    import kvmm
    c = kvmm.attach(daemon.sock, NS_A, fmt)
    yield c
    c.close()


class _Summary:
    def __init__(self) -> None:
        self.passed = self.failed = self.skipped = 0


_summary = _Summary()


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if report.passed and report.when == "call":
            _summary.passed += 1
        elif report.skipped:
            _summary.skipped += 1
        elif report.failed:
            _summary.failed += 1
    elif report.when == "teardown" and report.failed:
        _summary.failed += 1


def pytest_terminal_summary(terminalreporter):
    if not os.environ.get("KVMM_CMOCKA_SUMMARY"):
        return
    w = terminalreporter.write_line
    w(f"[  PASSED  ] {_summary.passed} test(s).")
    if _summary.failed:
        w(f"[  FAILED  ] {_summary.failed} test(s), listed above")
    if _summary.skipped:
        w(f"[  SKIPPED ] {_summary.skipped} test(s)")
