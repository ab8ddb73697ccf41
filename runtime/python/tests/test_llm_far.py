# SPDX-License-Identifier: MIT
"""Far reads (kvmm_far_map, kvmm_pin_far; PagedKV(far=True)): the bindings first - the far
window laid out like the pool, sealed pages kvmmd swapped to its host tier pinned and read
where they lie (the bytes written through the pool's views, at far_base + slot), the pin ended
by unpin_range, and the error paths (no host tier, an unknown sequence, too many blocks, a
tier that changed) - then the engine: a sequence bigger than its namespace's pool decoded with
far reads gives the reference's greedy tokens (fp32 KV) with pages really read in the host
tier and none faulted in for attention, and the fallbacks (no host tier: the usual pins; a
pin_far without room: that step chunked; a changed tier: the window mapped again)."""

import errno
import os

import pytest
import torch

from conftest import NS_A, Daemon, kvmmd_path  # noqa: E402

try:
    import kvmm
    from kvmm import _lib, admin
    from kvmm.llm.paged import PagedKV
except ImportError as e:  # the bindings or libkvmm are not built
    pytest.skip(f"kvmm package not importable: {e}", allow_module_level=True)

from kvmm.llm import Engine, SamplingParams, load_model  # noqa: E402
from kvmm.llm.testing import write_checkpoint  # noqa: E402

pytestmark = pytest.mark.skipif(not _lib.has("kvmm_pin_far"),
                                reason="this libkvmm has no far reads (kvmm_pin_far)")

LONG = [(i * 37 + 11) % 250 + 3 for i in range(150)]
TINY, TINY_FRAMES = "fartiny", 8  # the engine's pool: smaller than one sequence
SMALL, SMALL_FRAMES = "farsmall", 8  # the bindings' pool
SWAP_SLOTS = 64


@pytest.fixture(scope="module")
def daemon():
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip(f"kvmmd not built at {kvmmd_path()} (or set KVMM_KVMMD)")
    d = Daemon(["--namespace", f"{TINY}:{TINY_FRAMES}", "--namespace",
                f"{SMALL}:{SMALL_FRAMES}", "--namespace", "farwhole", "--frames", "600",
                "--swap", f"swap_host={SWAP_SLOTS * 16384}"])
    yield d
    log = d.log_text()
    rc = d.stop()
    assert rc == 0, f"kvmmd exited with {rc}:\n{log}"


@pytest.fixture(scope="module")
def noswap():
    """A kvmmd without a swap tier (conftest's: namespaces alpha and beta)."""
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip(f"kvmmd not built at {kvmmd_path()} (or set KVMM_KVMMD)")
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("llama"))
    write_checkpoint(d, "llama", seed=3)
    return load_model(d)


# ---- the bindings ---------------------------------------------------------------------


def _written_sealed(c, n: int) -> int:
    """A sequence of n full pages, page i filled with the byte i + 1 through the pool's views
    (each pinned while written), then sealed; in an 8-frame pool most end up in the host
    tier."""
    tpp = c.tokens_per_page
    V = c.views()
    seq = c.seq_create()
    for i in range(n):
        c.seq_append(seq, [(i * tpp + j) % 200 + 3 for j in range(tpp)])
        c.pin_range(seq, i, 1)
        f = int(c.block_table([seq], n)[0, i])
        V.page(f).fill_(i + 1)
        c.unpin_range(seq, i, 1)
        c.seal(seq, i, 1)
    return seq


def test_far_window_reads_host_tier_in_place(daemon, fmt):
    with kvmm.attach(daemon.sock, SMALL, fmt) as c:
        fv = c.far_views()
        assert c.far_views() is fv  # cached until the next map
        assert fv.far_base >= c.nr_frames and fv.nr_frames > fv.far_base
        assert fv.page_size == c.page_size and fv.device == "cpu"
        n = 12
        seq = _written_sealed(c, n)
        entries, nr_far = c.pin_far(seq, 0, n)
        try:
            assert entries.dtype == torch.int32 and entries.shape == (n,)
            assert 0 < nr_far <= n
            assert int((entries >= fv.far_base).sum()) == nr_far
            assert bool((entries >= 0).all()) and bool((entries < fv.nr_frames).all())
            # every page reads back what was written, in the pool or in the host tier
            for i in range(n):
                pg = fv.page(int(entries[i]))
                assert int(pg.min()) == int(pg.max()) == i + 1, f"block {i}"
            # the window's frames are the pool's pages
            table = c.block_table([seq], n)[0]
            for i in range(n):
                if int(entries[i]) < fv.far_base:
                    assert int(entries[i]) == int(table[i])
                    assert torch.equal(fv.page(int(entries[i])), c.views().page(int(table[i])))
        finally:
            c.unpin_range(seq, 0, n)
        # a pin in parts, into a block table's row in place
        row = torch.full((1, n), -7, dtype=torch.int32)
        _, a = c.pin_far(seq, 0, 5, out=row[0, :5])
        _, b = c.pin_far(seq, 5, n - 5, out=row[0, 5:])
        assert bool((row >= 0).all()) and a + b >= 1
        c.unpin_range(seq, 0, 5)
        c.unpin_range(seq, 5, n - 5)
        c.seq_free(seq)


def test_pin_far_ended_by_unpin_range(daemon, fmt):
    with kvmm.attach(daemon.sock, "farwhole", fmt) as c:
        c.far_views()
        seq = c.seq_create()
        c.seq_append(seq, LONG[:3 * c.tokens_per_page])
        entries, nr_far = c.pin_far(seq, 0, 3, like="numpy")
        assert nr_far == 0  # nothing swapped: every entry is a frame, the block table's
        assert list(entries) == list(c.block_table([seq], 3)[0])
        assert c.unpin_range(seq, 0, 3) == 3
        with pytest.raises(kvmm.KvmmError) as e:
            c.unpin_range(seq, 0, 3)  # ended: nothing of that range is pinned
        assert e.value.errno == errno.EINVAL
        c.seq_free(seq)


def test_pin_far_errors(daemon, fmt):
    with kvmm.attach(daemon.sock, "farwhole", fmt) as c:
        c.far_views()
        with pytest.raises(kvmm.KvmmError) as e:
            c.pin_far(1 << 40, 0, 1)  # no such sequence
        assert e.value.errno == errno.ENOENT
        seq = c.seq_create()
        c.seq_append(seq, LONG[:2 * c.tokens_per_page])
        with pytest.raises(kvmm.KvmmError) as e:
            c.pin_far(seq, 0, kvmm.PIN_FAR_MAX + 1)
        assert e.value.errno in (errno.E2BIG, errno.EINVAL)
        with pytest.raises(kvmm.KvmmError) as e:
            c.pin_far(seq, 1, 5)  # past the sequence's blocks
        assert e.value.errno == errno.EINVAL
        # entries arrays are checked before C
        with pytest.raises(ValueError):
            c.pin_far(seq, 0, 2, out=torch.empty(3, dtype=torch.int32))
        with pytest.raises(TypeError):
            c.pin_far(seq, 0, 2, out=torch.empty(2, dtype=torch.int64))
        with pytest.raises(ValueError):
            c.pin_far(seq, 0, 2, out=torch.empty(4, dtype=torch.int32)[::2])
        with pytest.raises(ValueError):
            c.far_views("bogus")
        c.seq_free(seq)


def test_far_views_without_host_tier(noswap, fmt):
    with kvmm.attach(noswap.sock, NS_A, fmt) as c:
        with pytest.raises(kvmm.KvmmError) as e:
            c.far_views()
        assert e.value.errno == errno.ENODEV
        # without a window pin_far pins like pin_range: every entry a frame
        seq = c.seq_create()
        c.seq_append(seq, LONG[:2 * c.tokens_per_page])
        entries, nr_far = c.pin_far(seq, 0, 2)
        assert nr_far == 0 and entries.tolist() == c.block_table([seq], 2)[0].tolist()
        c.unpin_range(seq, 0, 2)
        c.seq_free(seq)


def test_tier_changed_estale(fmt):
    """swapoff and swapon of the host tier: the next pin_far answers ESTALE (a plain
    KvmmError, not a reattach); mapping the window again empties the old window's views and
    works (ENODEV while no host tier is there)."""
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip(f"kvmmd not built at {kvmmd_path()} (or set KVMM_KVMMD)")
    ns, size = "farestale", SWAP_SLOTS * 16384
    d = Daemon(["--namespace", f"{ns}:8", "--frames", "400", "--swap", f"swap_host={size}"])
    try:
        with kvmm.attach(d.sock, ns, fmt) as c, admin.open(d.sock) as a:
            old = c.far_views()
            seq = _written_sealed(c, 12)
            _, nr_far = c.pin_far(seq, 0, 12)
            assert nr_far > 0
            c.unpin_range(seq, 0, 12)
            c.seq_free(seq)
            a.swapoff(1, ns=ns)
            a.swapon(1, size, priority=10, ns=ns)
            seq = _written_sealed(c, 12)
            with pytest.raises(kvmm.KvmmError) as e:
                c.pin_far(seq, 0, 12)
            assert e.value.errno == errno.ESTALE
            assert not isinstance(e.value, kvmm.KvmmReattached)
            new = c.far_views(remap=True)
            assert new is not old and old.nr_frames == 0 and old.k == []
            entries, nr_far = c.pin_far(seq, 0, 12)
            assert nr_far > 0
            for i in range(12):
                pg = new.page(int(entries[i]))
                assert int(pg.min()) == int(pg.max()) == i + 1, f"block {i}"
            c.unpin_range(seq, 0, 12)
            c.seq_free(seq)
            a.swapoff(1, ns=ns)
            with pytest.raises(kvmm.KvmmError) as e:
                c.far_views(remap=True)
            assert e.value.errno == errno.ENODEV
    finally:
        d.stop()


# ---- the engine -----------------------------------------------------------------------


def paged(model, sock, ns, **kw):
    c = model.cfg
    return PagedKV(c.num_layers, c.num_kv_heads, c.head_dim, kv_dtype="fp32", ns=ns,
                   socket_path=sock, **kw)


def reference(model, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(model.reference_logits(seq)[-1].argmax()))
    return seq[len(prompt):]


PROMPT = (LONG * 2)[:230]
N = 150  # 380 tokens: 12 pages of 32, in an 8-frame pool


@pytest.fixture(scope="module")
def want(model):
    return reference(model, PROMPT, N)


def _kernel_modes():
    return [True, False] if kvmm.kernels.available("cpu") else [False]


def _run(model, kv):
    e = Engine(model, kv, max_batch_tokens=kv.tokens_per_page)
    got = e.generate([PROMPT], SamplingParams(max_tokens=N, ignore_eos=True))[0]
    e.close()
    return got


@pytest.mark.parametrize("kernels", _kernel_modes())
def test_far_engine_bigger_than_the_pool(daemon, model, want, kernels):
    """12 pages in 8 frames, far reads: the reference's tokens, pages read in the host tier,
    no step chunked, and no page faulted in for attention."""
    with admin.open(daemon.sock) as a:
        before = admin.value(a.vmstat(ns=TINY), "pswpin") or 0
    kv = paged(model, daemon.sock, TINY, far=True, kernels=kernels)
    assert kv._far is not None and kv.far_why == ""
    assert -(-(len(PROMPT) + N) // kv.tokens_per_page) > TINY_FRAMES
    got = _run(model, kv)
    assert got.completions[0].token_ids == want
    assert got.recomputes == 0
    assert kv.stats["far_steps"] > 0 and kv.stats["far_pages"] > 0
    assert kv.stats["chunked_steps"] == 0 and kv.stats["far_fallback_steps"] == 0
    assert kv._tails == [] and kv._read is kv.views  # nothing pinned between steps
    with admin.open(daemon.sock) as a:
        after = admin.value(a.vmstat(ns=TINY), "pswpin") or 0
    # the chunked path faults in most of the sequence at every step (hundreds of pages
    # here); far reads none for attention (a seal may bring one back)
    assert after - before < N // 4, f"{after - before} pages swapped in"
    kv.close()


def test_far_unavailable_falls_back(noswap, model, want):
    """No host tier: far_why says so (ENODEV) and the store pins whole sequences."""
    kv = paged(model, noswap.sock, NS_A, far=True)
    assert kv._far is None and "errno %d" % errno.ENODEV in kv.far_why
    got = _run(model, kv)
    assert got.completions[0].token_ids == want
    assert kv.stats["far_steps"] == 0
    kv.close()


def test_far_fallbacks(daemon, model, want, monkeypatch):
    """A pin_far without room (OutOfMemoryError) runs that step chunked; one that finds the
    tier changed (ESTALE) maps the window again and pins again: the same tokens."""
    kv = paged(model, daemon.sock, TINY, far=True)
    real = kv.c.pin_far
    calls = {"n": 0, "remap": 0}

    def flaky(seq, block, nr_blocks, out=None, **kw):
        calls["n"] += 1
        if calls["n"] % 7 == 3:
            raise kvmm.errors.make_error(-errno.ENOMEM, "kvmm_pin_far")
        if calls["n"] % 7 == 5:
            raise kvmm.KvmmError(errno.ESTALE, "the host swap tier changed", "kvmm_pin_far")
        return real(seq, block, nr_blocks, out=out, **kw)

    real_views = kv.c.far_views

    def views(kind="torch", *, remap=False):
        calls["remap"] += remap
        return real_views(kind, remap=remap)

    monkeypatch.setattr(kv.c, "pin_far", flaky)
    monkeypatch.setattr(kv.c, "far_views", views)
    got = _run(model, kv)
    assert got.completions[0].token_ids == want
    assert kv.stats["far_fallback_steps"] > 0 and kv.stats["chunked_steps"] > 0
    assert calls["remap"] > 0 and kv.stats["far_steps"] > 0
    kv.close()
