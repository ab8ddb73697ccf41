# SPDX-License-Identifier: MIT
"""Zero-copy views of the pool: shapes, strides, the page layout, sharing across processes."""
from __future__ import annotations

import ctypes
import gc
import hashlib
import os
import subprocess
import sys
import weakref

import pytest

import kvmm
from conftest import NS_A, NS_B, PKG

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


def _bytes_at(addr: int, n: int) -> bytes:
    return ctypes.string_at(addr, n)


def _own_frame(c) -> int:
    """A frame this handle may write (a new page of its own: the pool is write-protected
    everywhere else)."""
    s = c.seq_create()
    c.seq_append(s, list(range(7, 7 + c.tokens_per_page)))
    return int(c.block_table([s], 4)[0][0])


def test_shapes_and_strides(client, fmt):
    v = client.views()
    assert client.views() is v  # made once
    tpp = client.tokens_per_page
    assert len(v.k) == len(v.v) == fmt.layers
    for t in v.k + v.v:
        assert t.shape == (client.nr_frames, tpp, fmt.kv_heads, fmt.head_dim)
        assert t.dtype == torch.float16
        assert t.stride() == (client.page_size // 2, fmt.kv_heads * fmt.head_dim,
                              fmt.head_dim, 1)
        assert t.device.type == "cpu"
    assert v.k_scales is None
    with pytest.raises(ValueError):
        v.scales(0)
    # every view is over the pool itself
    assert v.k[0].data_ptr() == client.frame_addr(0)
    assert v.v[1].data_ptr() == client.frame_addr(0) + 3 * client.layout.slab_bytes


def test_write_through_view_lands_in_the_page(client, fmt):
    v = client.views()
    L = client.layout
    frame, layer, tok, head = _own_frame(client), 1, 3, 1
    row = torch.arange(fmt.head_dim, dtype=torch.float16)
    v.v[layer][frame, tok, head] = row
    addr = (client.frame_addr(frame) + L.offset(layer, 1) + tok * L.row_bytes +
            head * fmt.head_dim * 2)
    assert _bytes_at(addr, fmt.head_dim * 2) == row.numpy().tobytes()
    # numpy views see the same bytes
    vn = client.views("numpy")
    assert (vn.v[layer][frame, tok, head] == row.numpy()).all()
    vn.k[0][frame, 0, 0, :4] = [1, 2, 3, 4]
    assert v.k[0][frame, 0, 0, :4].tolist() == [1, 2, 3, 4]
    assert bytes(v.page(frame)[:8].numpy()) == _bytes_at(client.frame_addr(frame), 8)
    with pytest.raises(ValueError):
        v.page(client.nr_frames)


def test_int8_scales(daemon):
    fmt = kvmm.Format(layers=2, kv_heads=2, head_dim=64, dtype="int8", quant_group=32)
    with kvmm.attach(daemon.sock, NS_B, fmt) as c:
        v = c.views()
        L = c.layout
        assert v.k[0].dtype == torch.int8
        ks, vs = v.scales(1)
        assert ks.dtype == torch.float32
        assert ks.shape == (c.nr_frames, c.tokens_per_page, 2, 2)
        assert vs.data_ptr() == c.frame_addr(0) + L.scale_offset(1, 1)
        f = _own_frame(c)
        vs[f, 1, 1, 0] = 0.5
        addr = c.frame_addr(f) + L.scale_offset(1, 1) + 1 * L.scale_row_bytes + 2 * 4
        assert _bytes_at(addr, 4) == np.float32(0.5).tobytes()
        vn = c.views("numpy")
        assert vn.v_scales[1][f, 1, 1, 0] == 0.5
        del v, ks, vs, vn


def test_bf16_needs_torch_for_views(daemon):
    fmt = kvmm.Format(layers=1, kv_heads=1, head_dim=32, dtype="bf16")
    with kvmm.attach(daemon.sock, NS_B, fmt) as c:
        assert c.views().k[0].dtype == torch.bfloat16
        with pytest.raises(TypeError, match="bfloat16"):
            c.views("numpy")
        with pytest.raises(ValueError):
            c.views("jax")


def test_views_keep_the_pool_mapped_after_close(daemon, fmt):
    c = kvmm.attach(daemon.sock, NS_A, fmt)
    k = c.views().k[0]
    session = weakref.ref(c._session)
    f = _own_frame(c)
    k[f, 0, 0, 0] = 3.0
    c.close()
    assert session() is not None  # the view holds the mapping
    assert k[f, 0, 0, 0].item() == 3.0  # still readable: no fault
    del k
    gc.collect()
    assert session() is None  # the last view gone: detached


_READER = r"""
import hashlib, sys
sys.path.insert(0, {pkg!r})
import kvmm
fmt = kvmm.Format(2, 2, 64, "fp16")
c = kvmm.attach({sock!r}, {ns!r}, fmt)
prompt = list(range(5000, 5000 + {n}))
s = c.seq_create()
hit = c.prefix_lookup(s, prompt)
table = c.block_table([s], 8)[0]
v = c.views()
h = hashlib.sha256()
for b in range(hit // c.tokens_per_page):
    f = int(table[b])
    for layer in range(fmt.layers):
        h.update(v.k[layer][f].numpy().tobytes())
        h.update(v.v[layer][f].numpy().tobytes())
# write a page of its own and let the parent look at it through its view
c.seq_append(s, prompt[hit:])
own = int(c.block_table([s], 8)[0][hit // c.tokens_per_page])
v.k[0][own].fill_(7.0)
print(hit, h.hexdigest(), own, flush=True)
sys.stdin.readline()
c.close()
"""


def test_two_processes_see_the_same_bytes(daemon, fmt, client):
    tpp = client.tokens_per_page
    n = 2 * tpp + 3
    prompt = list(range(5000, 5000 + n))
    s = client.seq_create()
    client.seq_append(s, prompt)
    table = client.block_table([s], 8)[0]
    v = client.views()
    gen = torch.Generator().manual_seed(1)
    h = hashlib.sha256()
    for b in range(2):
        f = int(table[b])
        for layer in range(fmt.layers):
            v.k[layer][f] = torch.randn(v.k[layer][f].shape, generator=gen).half()
            v.v[layer][f] = torch.randn(v.v[layer][f].shape, generator=gen).half()
            h.update(v.k[layer][f].numpy().tobytes())
            h.update(v.v[layer][f].numpy().tobytes())
    client.seal(s)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    code = _READER.format(pkg=PKG, sock=daemon.sock, ns=NS_A, n=n)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = p.stdout.readline().split()
        assert len(line) == 3, "the reader process failed"
        hit, digest, own = int(line[0]), line[1], int(line[2])
        assert hit == 2 * tpp
        assert digest == h.hexdigest()
        assert own not in table[:3].tolist()
        assert bool((v.k[0][own] == 7.0).all())  # its write, seen through our view
    finally:
        p.stdin.write("\n")
        p.stdin.close()
        assert p.wait(30) == 0
    client.seq_free(s)


@pytest.mark.parametrize("fmt_args", [
    (2, 2, 64, "fp16", 0), (3, 1, 32, "fp32", 0), (1, 4, 128, "bf16", 0),
    (2, 2, 64, "int8", 32), (5, 3, 24, "int8", 8), (1, 1, 3, "int8", 1),
])
@pytest.mark.parametrize("page_size", [16384, 2 << 20, 4099])
def test_layout_equals_the_librarys(fmt_args, page_size):
    """PageLayout, which the views are built from, against kvmm_fmt_offset of lib/format.c."""
    import ctypes as C

    from kvmm import _lib
    if not _lib.has("kvmm_fmt_offset"):
        pytest.skip("this libkvmm does not export kvmm_fmt_offset")
    f = kvmm.Format(*fmt_args)
    L = kvmm.PageLayout.of(f, page_size)
    buf = (C.c_uint64 * (_lib.FMT_BUF_BYTES // 8))()
    wire = _lib.Format(f.layers, f.kv_heads, f.head_dim, f.dtype, f.quant_group, 0)
    assert _lib.lib.kvmm_fmt_init(buf, C.byref(wire), page_size) == 0
    for layer in range(f.layers):
        for kv in (0, 1):
            for tok in (0, L.tokens_per_page - 1):
                assert _lib.lib.kvmm_fmt_offset(buf, layer, kv, tok) == \
                    L.offset(layer, kv) + tok * L.row_bytes
                if f.dtype == kvmm.DTYPE_INT8:
                    assert _lib.lib.kvmm_fmt_scale_offset(buf, layer, kv, tok) == \
                        L.scale_offset(layer, kv) + tok * L.scale_row_bytes
    assert _lib.lib.kvmm_fmt_offset(buf, 0, 0, L.tokens_per_page) == 2 ** 64 - 1


_SEALED_WRITER = r"""
import sys
sys.path.insert(0, {pkg!r})
import kvmm
fmt = kvmm.Format(2, 2, 64, "fp16")
c = kvmm.attach({sock!r}, {ns!r}, fmt, wprotect={wprotect})
prompt = list(range({first}, {first} + {n}))
s = c.seq_create()
hit = c.prefix_lookup(s, prompt)
assert hit == {n}, hit
f = int(c.block_table([s], 8)[0][0])
print(int(c.write_protected), flush=True)
c.views().k[0][f].fill_(-1.0)  # a sealed page: SIGSEGV when write-protected
print("written", flush=True)
"""


@pytest.mark.parametrize("wprotect", [True, False])
def test_write_into_a_sealed_page_faults(daemon, fmt, client, wprotect):
    """A view is writable numpy/torch memory over a read-only mapping: writing a sealed page
    through it kills the writer (SIGSEGV), and the page keeps its bytes; with
    ``wprotect=False`` the write lands."""
    tpp = client.tokens_per_page
    first = 9000 if wprotect else 9500  # a prompt of its own: not the other case's cached page
    prompt = list(range(first, first + tpp))
    s = client.seq_create()
    client.seq_append(s, prompt)
    f = int(client.block_table([s], 8)[0][0])
    v = client.views()
    assert client.write_protected
    v.k[0][f].fill_(2.0)
    client.seal(s)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if env.get("ASAN_OPTIONS") is not None or "libasan" in env.get("LD_PRELOAD", ""):
        # sanitized runs (make check SAN=1): ASan would catch the SIGSEGV and exit(1); the
        # writer must die of the signal itself, as it does in production
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":handle_segv=0"
    code = _SEALED_WRITER.format(pkg=PKG, sock=daemon.sock, ns=NS_A, n=tpp, wprotect=wprotect,
                                 first=first)
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                       env=env, timeout=60)
    lines = p.stdout.split()
    assert lines[0] == ("1" if wprotect else "0")
    if wprotect:
        assert p.returncode == -11, p.returncode  # SIGSEGV
        assert lines[1:] == []
        assert bool((v.k[0][f] == 2.0).all())
    else:
        assert p.returncode == 0 and lines[1] == "written"
        assert bool((v.k[0][f] == -1.0).all())
    client.seq_free(s)


def test_scratch_views(fmt):
    """PoolViews.scratch: pages of this process laid out as kvmm's, for kvmm.kernels."""
    from kvmm import PageLayout, PoolViews

    layout = PageLayout.of(fmt, 16384)
    st = PoolViews.scratch(fmt, 16384, 3)
    assert st.nr_frames == 3 and st.device == "cpu" and st.kind == "torch"
    assert st.tokens_per_page == layout.tokens_per_page
    assert st.base.numel() == 3 * 16384 and st.base_ptr == st.base.data_ptr()
    st.k[fmt.layers - 1][2, 1] = 1
    off = 2 * 16384 + layout.offset(fmt.layers - 1, 0) + layout.row_bytes
    assert int(st.base[off:off + layout.row_bytes].count_nonzero()) > 0
    assert float(st.v[0].abs().sum()) == 0.0
    with pytest.raises(ValueError):
        PoolViews.scratch(fmt, 16384, 0)
    with pytest.raises(ValueError):
        PoolViews.scratch(fmt, 4, 1)  # not one token a page
