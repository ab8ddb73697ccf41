# SPDX-License-Identifier: MIT
"""KV in kvmm pages: the KVStore of kv.py over a libkvmm handle (the `kvmm` package).

Where each engine call goes in kvmm:

    new_seq        kvmm_seq_create
    lookup         kvmm_prefix_lookup: full pages any process of the namespace sealed
    fork           kvmm_seq_fork (copy-on-write: a shared partial last page is copied by the
                   daemon on the first append)
    begin_step     kvmm_seq_append of each sequence's new token ids (allocates its pages),
                   kvmm_pin of the batch, kvmm_block_table into an int32 tensor; the slots of
                   the new tokens (frame * tokens_per_page + row) come from the table
    attention      reshape-and-cache of the layer's new K, V into their slots, then the paged
                   prefill (or, for a batch of single tokens, decode) kernel over the block
                   tables; the views of the pool are made once at attach
    end_step       kvmm_unpin
    seal_computed  kvmm_seal of the full pages written so far (a prompt just computed)
    finish         kvmm_seal of the full pages (their KV is written), kvmm_seq_free
    free           kvmm_seq_free

Preemption: under memory pressure kvmmd takes a sequence's pages and sends a PREEMPT event;
every call on that sequence then fails with KVMM_EPREEMPTED. begin_step collects the events
(and such failures) and returns the lost sequences: the engine frees and recomputes them. An
append that finds no memory and no preempted sequence raises OutOfMemoryError: the engine then
preempts one of its own sequences (the youngest) and retries.

kvmmd going away (killed, restarted, upgraded): with ``reattach_timeout`` set, a call that
finds it gone (KvmmDaemonGone) makes the store wait up to that long for it to come back
(Client.reattach), take the new pool's views, and report every sequence it held as lost at the
next begin_step, like a preempted one: the engine recomputes them, from whatever prefixes the
restarted daemon kept (a warm-restarted swap file).  Their old ids are never used again.

Chunked attention (chunk_pages=N): for a sequence that does not fit in the namespace's pool
(kvmm_pin of it can never succeed), or for every step with the option set. begin_step pins
only the pages the step writes (kvmm_pin_range of the new tokens' blocks, held until
end_step); attention() then goes over each sequence's pages N at a time: pin the chunk
(kvmm_pin_range, its swapped pages faulted in; the rest of the sequence stays unpinned, so
kvmswapd may swap it out), read the chunk's block-table slice, compute the chunk's partial
attention and its log-sum-exp, unpin, and merge the partials exactly (online softmax).  The
chunks go forwards on even layers and backwards on odd ones, so a layer starts on the pages the
last one ended on (still resident); forward chunks start the reads of the next one
(KVMM_PIN_RANGE_F_PREFETCH).  Computed in fp32 in torch over the views (the paged kernels
return no log-sum-exp).  Without the option, a step whose pin finds no room (KVOutOfMemory:
nothing preempted, one sequence alone is bigger than the pool) is retried chunked with
AUTO_CHUNK_PAGES pages a chunk (a quarter of the pool, if less).  A chunk that finds no room
raises KVOutOfMemory from attention(); a sequence preempted meanwhile is reported by
step_lost() and its output of the step is void.

Far reads (far=True; a pool in host memory and a host-memory swap tier, KVMM_FEAT_FAR): the
host tier is mapped read-only right after the pool (the far window, Client.far_views) and
begin_step pins each sequence's blocks [0, end) with kvmm_pin_far: a sealed page kvmmd swapped
to the host tier stays there, its slot pinned, and its entry in the step's block table is
far_base + slot instead of a frame; the other pages (the ones the step writes among them,
never sealed) are pinned in the pool like kvmm_pin_range does.  Attention then runs
unchunked, the kernels (or the torch path) reading through the far window with that table
and writing the new K, V through the pool's views; end_step ends the pins with
kvmm_unpin_range, and seals the full pages the step completed (their KV is written), so the
next step may read them far instead of faulting them in.  A sequence bigger than the pool
runs so without a page faulted in.  Where far reads are unavailable (an old daemon or
libkvmm: EOPNOTSUPP, no host tier: ENODEV) the store says so once (far_why) and goes on
without; a pin that finds the tier changed (ESTALE) maps the window again and is retried
once; one that finds no room for the pages it must fault in (unsealed ones on the tier)
runs the step chunked instead (chunk_pages, else auto_chunk_pages()).  stats: far_steps,
far_pages (entries read in place), far_fallback_steps.

Kernels: kvmm.kernels (libkvmm's CPU or CUDA kernels on tensors) when the loaded libkvmm
has them; otherwise the same computation in torch over the zero-copy views (a gather through
the block table, then attention), so the engine runs on any libkvmm. .kernel says which.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import importlib
import math
import os
from typing import Dict, List, Optional

import torch

from .kv import KVOutOfMemory, KVStore, StepEntry
from .model import causal_attention

__all__ = ["PagedKV", "model_identity", "namespace_of", "AUTO_CHUNK_PAGES"]

AUTO_CHUNK_PAGES = 32  # chunk of a step that does not fit, without chunk_pages
_RANGE_TAG = 1 << 40  # user_data of the range pins attention() submits

_KV_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
              "int8": torch.int8}


def _checkpoint_digest(directory: str) -> str:
    h = hashlib.sha256()
    with open(os.path.join(directory, "config.json"), "rb") as f:
        h.update(f.read())
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors"):
            st = os.stat(os.path.join(directory, name))
            with open(os.path.join(directory, name), "rb") as f:
                h.update(name.encode() + str(st.st_size).encode() + f.read(65536))
    return h.hexdigest()


def namespace_of(directory: str) -> str:
    """A namespace name for a checkpoint: engines of the same model (config and weights'
    headers alike) share prefixes, engines of different models never do."""
    return "llm-" + _checkpoint_digest(directory)[:16]


def model_identity(directory: str) -> bytes:
    """The checkpoint's identity for kvmm (kvmm.attach(model=...)): its config and weights'
    headers, hashed. Two checkpoints of the same shape in one namespace (another revision,
    other weights) then never share KV; the same checkpoint does."""
    return b"kvmm.llm/" + _checkpoint_digest(directory).encode()


class _FarFallback(Exception):
    """A far step cannot be pinned (no room for the pages pin_far must fault in, or the far
    window gone): its pins are undone, the step runs another way."""


class _PSeq:
    __slots__ = ("id", "appended", "lost", "gone", "sealed")

    def __init__(self, sid: int):
        self.id = sid
        self.appended = 0  # tokens given to kvmm_seq_append (or mapped by lookup)
        self.sealed = 0  # blocks [0, sealed) are sealed (far reads: seal as written)
        self.lost = False
        self.gone = False  # lost with a kvmmd that went away: its id means nothing now


class PagedKV(KVStore):
    """KV of every sequence in kvmm pages of namespace ns (see the module docstring)."""

    name = "kvmm"

    def __init__(self, layers: int, kv_heads: int, head_dim: int, kv_dtype: str = "fp16",
                 ns: str = "default", socket_path: Optional[str] = None,
                 quant_group: int = 0, kernels: Optional[bool] = None, client=None,
                 priority: int = 0, model: Optional[bytes] = None,
                 reattach_timeout: Optional[float] = None, chunk_pages: Optional[int] = None,
                 auto_chunk: bool = True, lookup_pages: Optional[int] = None,
                 far: bool = False):
        import kvmm  # the libkvmm bindings: only this store needs them

        self._kvmm = kvmm
        if chunk_pages is not None and (not isinstance(chunk_pages, int) or chunk_pages < 1):
            raise ValueError(f"chunk_pages {chunk_pages!r}: a number of pages, at least 1")
        # attention over at most chunk_pages pinned pages at a time (None: whole sequences,
        # chunked only when a step does not fit and auto_chunk is set)
        self.chunk_pages = chunk_pages
        self.auto_chunk = auto_chunk
        # the most pages one prefix lookup maps (None: all it finds): a lookup faults every
        # hit in at once, which a pool smaller than the prefix cannot hold
        self.lookup_pages = lookup_pages
        self._chunk: Optional[int] = None  # this step's chunk (None: not chunked)
        self._tails: List[tuple] = []  # this step's range pins (seq id, block, blocks)
        # the chunk attention() holds pinned (seq id, block, blocks): kept from one layer to
        # the next (odd layers start where even ones end), ended with the next chunk's pin
        # in one submission, or at end_step
        self._held: Optional[tuple] = None
        self._batched_pins = True  # range pins through kvmm_submit (False: an old libkvmm)
        self._stage = None  # scratch pages of the chunked attention (False: none usable)
        self._lost_in_step: List[_PSeq] = []  # preempted while a chunked step ran
        if kv_dtype not in _KV_DTYPES:
            raise ValueError(f"kv dtype {kv_dtype!r}: one of {', '.join(_KV_DTYPES)}")
        if kv_dtype == "int8" and not quant_group:
            quant_group = min(head_dim, 32)
            while head_dim % quant_group:
                quant_group //= 2
        self.kv_dtype = kv_dtype
        self.fmt = kvmm.Format(layers=layers, kv_heads=kv_heads, head_dim=head_dim,
                               dtype=kv_dtype, quant_group=quant_group if kv_dtype == "int8"
                               else 0)
        self._own = client is None
        # model: the checkpoint's identity (model_identity()), hashed into every cache key
        self.c = client if client is not None else kvmm.attach(socket_path, ns=ns, fmt=self.fmt,
                                                               model=model)
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.tokens_per_page = self.c.tokens_per_page
        self.views = self.c.views("torch")
        self.device = torch.device(self.views.device)
        self.priority = priority
        self._seqs: Dict[int, _PSeq] = {}
        self._batch: List[StepEntry] = []
        self._pinned: List[int] = []
        self.stats = {"preempt_events": 0, "sealed": 0, "reattached": 0, "chunked_steps": 0,
                      "chunks": 0, "far_steps": 0, "far_pages": 0, "far_fallback_steps": 0}
        # kvmmd went away: wait this long for it to come back (Client.reattach), then
        # recompute every sequence; None: KvmmDaemonGone reaches the caller
        self.reattach_timeout = reattach_timeout
        try:
            kmod = importlib.import_module("kvmm.kernels")
        except ImportError:
            kmod = None
        have = kmod is not None and kmod.available(self.views.device)
        if kernels is None:
            kernels = have
        elif kernels and not have:
            raise RuntimeError("kvmm: this libkvmm has no paged kernels (kvmm.kernels)")
        self._k = kmod if kernels else None
        self.kernel = "libkvmm" if kernels else "torch"
        # far reads: the far window's views while they are in use (None: not asked for, or
        # unavailable, far_why then says why); _read: the views this step's attention reads
        self.far = far
        self.far_why = ""
        self._far = self._far_window() if far else None
        self._read = self.views

    def _far_window(self, remap: bool = False):
        """The far window's torch views (Client.far_views), or None where far reads cannot
        be had: a daemon or libkvmm without them, a pool in GPU memory (EOPNOTSUPP), no host
        swap tier (ENODEV); far_why keeps the reason (the store goes on without)."""
        kvmm = self._kvmm
        try:
            return self.c.far_views("torch", remap=remap)
        except kvmm.KvmmError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.ENODEV) or isinstance(
                    err, kvmm.KvmmDaemonGone):
                raise
            self.far_why = str(err)
            return None

    # ---- kvmmd going away -----------------------------------------------------------------
    def _reattach(self) -> None:
        """kvmmd went away (called inside the handler of KvmmDaemonGone, which it raises again
        when no reattach_timeout is set): attach again when it is back;
        every sequence of ours died with it and is reported lost by the next begin_step, so
        the engine recomputes it (from the prefixes the new daemon still has, if any)."""
        if self.reattach_timeout is None:
            raise
        self.c.reattach(self.reattach_timeout)
        for s in self._seqs.values():
            s.lost = s.gone = True
        self._pinned = []
        self._tails = []
        self._held = None
        self._chunk = None
        self._batch = []
        self.views = self.c.views("torch")  # the views of the old pool are void
        self._read = self.views
        if self.far:  # so is the far window
            self._far = self._far_window()
        self.tokens_per_page = self.c.tokens_per_page
        self.stats["reattached"] += 1

    # ---- sequences ----------------------------------------------------------------------
    def new_seq(self):
        try:
            sid = self.c.seq_create(self.priority)
        except self._kvmm.KvmmDaemonGone:
            self._reattach()
            sid = self.c.seq_create(self.priority)
        s = _PSeq(sid)
        self._seqs[s.id] = s
        return s

    def lookup(self, seq, tokens):
        if len(tokens) < self.tokens_per_page or seq.lost:
            return 0
        tokens = list(tokens)
        if self.lookup_pages is not None:
            # a lookup maps (faulting in) every page it hits in one go: in a pool smaller
            # than the prefix, at most lookup_pages of it (the rest is computed)
            tokens = tokens[:max(1, self.lookup_pages) * self.tokens_per_page]
        try:
            hit = self.c.prefix_lookup(seq.id, tokens)
        except self._kvmm.OutOfMemoryError:
            if self.chunk_pages is None:
                raise
            return 0
        except self._kvmm.KvmmDaemonGone:
            self._reattach()
            return 0  # seq is lost: the next begin_step says so
        seq.appended = hit
        seq.sealed = hit // self.tokens_per_page  # the pages a lookup maps are sealed ones
        return hit

    def fork(self, seq, ntokens):
        child = _PSeq(self.c.seq_fork(seq.id, ntokens))
        child.appended = ntokens
        self._seqs[child.id] = child
        return child

    def _seal(self, seq) -> None:
        """kvmm_seal of seq's full pages; a long sequence a chunk of blocks at a time (each
        seal brings back what it seals, so one that does not fit is sealed in parts).  A
        part that finds no room is left unsealed (the cache misses it, nothing is lost)."""
        full = seq.appended // self.tokens_per_page
        size = self.chunk_pages or self.auto_chunk_pages()
        if full <= size:
            try:
                self.c.seal(seq.id)
            except self._kvmm.OutOfMemoryError:
                pass
            return
        for b in range(0, full, size):
            try:
                self.c.seal(seq.id, b, min(size, full - b))
            except self._kvmm.OutOfMemoryError:
                return  # the later blocks cannot be sealed before this one

    def seal_computed(self, seq):
        if seq.lost:
            return
        try:
            self._seal(seq)
        except self._kvmm.PreemptedError:
            seq.lost = True  # the next begin_step reports it
        except self._kvmm.KvmmDaemonGone:
            if self.reattach_timeout is None:
                raise
            seq.lost = True  # the next begin_step reattaches

    def finish(self, seq):
        if not seq.lost:
            try:
                self._seal(seq)
                self.stats["sealed"] += seq.appended // self.tokens_per_page
            except self._kvmm.PreemptedError:
                pass  # nothing to keep: its pages are gone
            except self._kvmm.KvmmDaemonGone:
                if self.reattach_timeout is None:
                    raise
                seq.gone = True  # finished: its output is there, its KV died with kvmmd
        self.free(seq)

    def free(self, seq):
        if self._seqs.pop(seq.id, None) is not None and not seq.gone:
            try:
                self.c.seq_free(seq.id)
            except self._kvmm.KvmmDaemonGone:
                if self.reattach_timeout is None:
                    raise

    @property
    def live(self) -> int:
        return len(self._seqs)

    # ---- events -------------------------------------------------------------------------
    def poll_preempted(self) -> List[object]:
        """Sequences of ours kvmmd preempted since the last poll (PREEMPT events)."""
        out = []
        while True:
            cqes = self.c.complete(64, 0)
            if not cqes:
                return out
            for cqe in cqes:
                if cqe.is_event and cqe.seq in self._seqs:
                    s = self._seqs[cqe.seq]
                    if not s.lost:
                        s.lost = True
                        self.stats["preempt_events"] += 1
                        out.append(s)

    # ---- a step -------------------------------------------------------------------------
    def begin_step(self, batch: List[StepEntry]) -> List[object]:
        try:
            return self._begin_step(batch)
        except self._kvmm.KvmmDaemonGone:
            self._reattach()
            return [s for s in self._seqs.values() if s.lost]

    def _begin_step(self, batch: List[StepEntry]) -> List[object]:
        kvmm = self._kvmm
        self.poll_preempted()
        self._append_async(batch)
        for e in batch:  # what the burst did not do (none left, mostly): one by one
            s = e.seq
            end = e.start + len(e.new)
            while not s.lost and s.appended < end:
                if s.appended < e.start:
                    raise ValueError(f"sequence {s.id}: step writes at {e.start}, kvmm holds "
                                     f"{s.appended} tokens")
                try:
                    s.appended = self.c.seq_append(s.id, list(e.new[s.appended - e.start:]))
                except kvmm.PreemptedError:
                    s.lost = True
                except kvmm.OutOfMemoryError:
                    # kvmmd preempts a victim when it runs out: its event says which, and
                    # its pages are free again, so try once more; no victim: the engine's turn
                    more = self.poll_preempted()
                    if not more:
                        raise KVOutOfMemory(f"kvmm namespace {self.c.ns}: out of pages") from None
        live = [e for e in batch if not e.seq.lost]
        self._chunk = None
        self._read = self.views
        if self._far is not None:
            try:
                return self._begin_far(live)
            except _FarFallback:
                pass  # nothing of it is pinned
            live = [e for e in batch if not e.seq.lost]
            if self._far is not None:  # no room for what pin_far faults in: chunked
                self.stats["far_fallback_steps"] += 1
                return self._begin_chunked(batch, live,
                                           self.chunk_pages or self.auto_chunk_pages())
            # the window is gone (the host tier was removed): on as without far reads
        if self.chunk_pages is not None:
            return self._begin_chunked(batch, live, self.chunk_pages)
        try:
            self._pin_whole(live)
        except KVOutOfMemory:
            live = [e for e in batch if not e.seq.lost]
            if not self.auto_chunk or len(live) != 1:
                raise  # several: the engine gives one up first
            # one sequence alone does not fit: attention a chunk at a time
            return self._begin_chunked(batch, live, self.auto_chunk_pages())
        live = [e for e in batch if not e.seq.lost]
        self._pinned = [e.seq.id for e in live]
        self._batch = live
        if live:
            self._prepare(live)
        # every lost sequence still ours, including those learnt of in a step that raised:
        # the engine frees each, so none is reported twice
        return [s for s in self._seqs.values() if s.lost]

    def _begin_far(self, live: List[StepEntry]) -> List[object]:
        """Pin each sequence's blocks [0, end) with kvmm_pin_far (its pages in the host tier
        where they lie, the rest in the pool, the pages the step writes included) into the
        rows of the step's block table, which the attention reads through the far window.
        Raises _FarFallback, its pins undone, when a pin finds no room (OutOfMemoryError:
        pages that must be faulted in) or the window is gone; a changed host tier (ESTALE)
        maps the window again and pins the step again, once."""
        kvmm = self._kvmm
        tpp = self.tokens_per_page
        most = kvmm.PIN_FAR_MAX
        for attempt in (0, 1):
            nbs = [-(-(e.start + len(e.new)) // tpp) for e in live]
            table = torch.full((len(live), max([1] + nbs)), -1, dtype=torch.int32)
            pins: List[tuple] = []
            far_pages = 0
            try:
                for i, e in enumerate(live):
                    for b in range(0, nbs[i], most):  # pin_far takes at most `most` blocks
                        n = min(most, nbs[i] - b)
                        try:
                            _, nf = self.c.pin_far(e.seq.id, b, n, out=table[i, b:b + n])
                        except kvmm.PreemptedError:
                            e.seq.lost = True
                            break
                        except kvmm.OutOfMemoryError:
                            if self.poll_preempted() and e.seq.lost:
                                break
                            raise _FarFallback() from None
                        pins.append((e.seq.id, b, n))
                        far_pages += nf
            except BaseException as err:
                self._unpin_ranges(pins)
                if not (isinstance(err, kvmm.KvmmError) and err.errno == errno.ESTALE
                        and not isinstance(err, kvmm.KvmmReattached)):
                    raise
                if attempt:
                    raise _FarFallback() from None  # changed again: this step chunked
                # the host tier changed (swapoff, swapon): map the window again
                self._far = self._far_window(remap=True)
                if self._far is None:
                    raise _FarFallback() from None
                continue
            break
        keep = [i for i, e in enumerate(live) if not e.seq.lost]
        live = [live[i] for i in keep]
        table = table[keep]
        if live:
            # the columns of the pages the step writes from kvmm_block_table (the same
            # frames), which also makes them writable in this process (write protection)
            try:
                bt = self.c.block_table([e.seq.id for e in live], table.shape[1])
            except BaseException:
                self._unpin_ranges(pins)
                raise
            for i, e in enumerate(live):
                b0 = e.start // tpp
                table[i, b0:] = bt[i, b0:]
        self._tails = pins
        self._read = self._far
        self.stats["far_steps"] += 1
        self.stats["far_pages"] += far_pages
        self._batch = live
        if live:
            self._prepare(live, table=table)
        return [s for s in self._seqs.values() if s.lost]

    def _unpin_ranges(self, pins: List[tuple]) -> None:
        """Undo range pins (a step that will not run); errors ignored (a preempted
        sequence's pins went with it)."""
        for t in pins:
            try:
                self.c.unpin_range(*t)
            except self._kvmm.KvmmError:
                pass

    def auto_chunk_pages(self) -> int:
        """The chunk of a step that does not fit (no chunk_pages): AUTO_CHUNK_PAGES, or a
        quarter of the pool when that is less."""
        return max(1, min(AUTO_CHUNK_PAGES, self.c.nr_frames // 4))

    def _begin_chunked(self, batch: List[StepEntry], live: List[StepEntry], chunk: int
                       ) -> List[object]:
        """Pin only the pages each sequence's new tokens go to (the rest is pinned a chunk
        at a time by attention()); KVOutOfMemory when even those find no room."""
        kvmm = self._kvmm
        tpp = self.tokens_per_page
        tails = []
        try:
            for e in live:
                b0 = e.start // tpp
                n = -(-(e.start + len(e.new)) // tpp) - b0
                if n <= 0:
                    continue
                try:
                    self.c.pin_range(e.seq.id, b0, n)
                except kvmm.PreemptedError:
                    e.seq.lost = True
                    continue
                except kvmm.OutOfMemoryError:
                    if self.poll_preempted() and e.seq.lost:
                        continue
                    raise KVOutOfMemory(f"kvmm namespace {self.c.ns}: no room for the "
                                        f"{n} pages a step writes") from None
                tails.append((e.seq.id, b0, n))
        except BaseException:
            for t in tails:
                try:
                    self.c.unpin_range(*t)
                except kvmm.KvmmError:
                    pass
            raise
        self._tails = tails
        self._chunk = chunk
        self.stats["chunked_steps"] += 1
        live = [e for e in live if not e.seq.lost]
        self._batch = live
        if live:
            self._prepare(live, [e.seq.id for e in live])
        return [s for s in self._seqs.values() if s.lost]

    def _pin_whole(self, live: List[StepEntry]) -> None:
        """kvmm_pin of the batch's sequences (each whole); sequences found preempted are
        marked lost; KVOutOfMemory when the batch does not fit."""
        kvmm = self._kvmm
        ids = [e.seq.id for e in live]
        tries = 0
        while ids:
            try:
                self.c.pin(ids)
                break
            except kvmm.PreemptedError:
                pass
            except kvmm.OutOfMemoryError:
                if not self.poll_preempted():
                    raise KVOutOfMemory(f"kvmm namespace {self.c.ns}: no room to pin") from None
            tries += 1
            if tries > 3:  # each alone pins, the batch does not fit: make room
                raise KVOutOfMemory(f"kvmm namespace {self.c.ns}: the batch does not fit")
            # which ones are gone: the batch pin pinned nothing; try each alone
            for e in live:
                try:
                    self.c.pin([e.seq.id])
                    self.c.unpin([e.seq.id])
                except kvmm.PreemptedError:
                    e.seq.lost = True
                except kvmm.OutOfMemoryError:
                    pass
            self.poll_preempted()
            live = [e for e in live if not e.seq.lost]
            ids = [e.seq.id for e in live]

    def _append_async(self, batch: List[StepEntry]) -> None:
        """The step's appends as one burst (kvmm_submit, then kvmm_complete): one wake-up of
        the daemon instead of a round trip per sequence. Failures are left to the caller's
        loop, which retries them one by one (and handles running out of memory)."""
        kvmm = self._kvmm
        todo = [e for e in batch
                if not e.seq.lost and e.seq.appended == e.start and len(e.new)]
        if len(todo) < 2:
            return
        sqes = [kvmm.Sqe(kvmm.Op.SEQ_APPEND, seq=e.seq.id, data=list(e.new), user_data=i + 1)
                for i, e in enumerate(todo)]
        n = self.c.submit(sqes)
        done = 0
        while done < n:
            for cqe in self.c.complete(max(64, n), 1):
                if cqe.is_event:
                    s = self._seqs.get(cqe.seq)
                    if s is not None and not s.lost:
                        s.lost = True
                        self.stats["preempt_events"] += 1
                    continue
                done += 1
                s = todo[cqe.user_data - 1].seq
                if cqe.res == 0:
                    s.appended = cqe.nr_tokens
                elif cqe.preempted:
                    s.lost = True

    def _prepare(self, batch: List[StepEntry], ids: Optional[List[int]] = None,
                 table: Optional[torch.Tensor] = None) -> None:
        """Block table, context and query lengths, and the new tokens' slots of the step.
        table: the step's block table already made (far reads: pin_far's entries, pages
        in the far window); else kvmm_block_table of the batch."""
        tpp = self.tokens_per_page
        ctx = [e.start + len(e.new) for e in batch]
        max_blocks = max(1, max(-(-n // tpp) for n in ctx))
        self.max_blocks = max_blocks
        # int32 [seqs, max_blocks]; chunked: the new tokens' pages are right, the others are
        # read again when their chunk is pinned
        if table is not None:
            self.table = table[:, :max_blocks].contiguous()
        else:
            self.table = self.c.block_table(self._pinned if ids is None else ids, max_blocks)
        self.ctx_lens = torch.tensor(ctx, dtype=torch.int32)
        qlens = [len(e.new) for e in batch]
        self.q_lens = torch.tensor(qlens, dtype=torch.int32)
        self.decode_only = all(n == 1 for n in qlens)
        if self.decode_only:
            # a decode step (one token a sequence): the same, in fewer tensor operations
            pos = torch.tensor([e.start for e in batch], dtype=torch.long)
            row = torch.arange(len(batch))
        else:
            pos = torch.cat([torch.arange(e.start, e.start + len(e.new)) for e in batch])
            row = torch.repeat_interleave(torch.arange(len(batch)), self.q_lens.long())
        frames = self.table[row, pos // tpp].long()
        if bool((frames < 0).any()):
            raise RuntimeError("kvmm: a new token has no page in the block table")
        if table is not None and bool((frames >= self._far.far_base).any()):
            # the pages a step writes are never sealed, so never left in the host tier
            raise RuntimeError("kvmm: pin_far left a page the step writes in the host tier")
        self.slots = frames * tpp + pos % tpp
        dev = self.device
        self._frames, self._rows = frames.to(dev), (pos % tpp).to(dev)
        if self.device.type != "cpu":
            self.table_dev = self.table.to(self.device)
            self.slots_dev = self.slots.to(self.device)
            self.ctx_dev = self.ctx_lens.to(self.device)
            self.qlen_dev = self.q_lens.to(self.device)

    def attention(self, layer, q, k, v):
        if self._chunk is not None:
            return self._attention_chunked(layer, q, k, v)
        if self._k is not None:
            return self._attention_kernels(layer, q, k, v)
        return self._attention_torch(layer, q, k, v)

    def step_lost(self) -> List[object]:
        """Sequences kvmmd preempted while the step ran (a chunk's pin found them gone):
        their output of this step is void, the engine recomputes them."""
        out, self._lost_in_step = self._lost_in_step, []
        return out

    def end_step(self):
        ranges = self._tails + ([self._held] if self._held is not None else [])
        self._held = None
        if len(ranges) > 1 and self._batched_pins:
            # every range pin of the step ends in one submission
            try:
                self._range_ops([(False, t) for t in ranges])
                ranges = []
            except self._kvmm.KvmmDaemonGone:
                if self.reattach_timeout is None:
                    raise
                ranges = []
        for t in ranges:
            try:
                self.c.unpin_range(*t)
            except self._kvmm.PreemptedError:
                pass
            except self._kvmm.KvmmDaemonGone:
                if self.reattach_timeout is None:
                    raise
                break
        self._tails = []
        self._chunk = None
        self._read = self.views
        if self._far is not None:
            self._seal_written()
        if self._pinned:
            try:
                self.c.unpin(self._pinned)
            except self._kvmm.PreemptedError:
                pass  # a victim while pinned: the next begin_step learns of it
            except self._kvmm.KvmmDaemonGone:
                if self.reattach_timeout is None:
                    raise  # else the next begin_step reattaches
        self._pinned = []
        self._batch = []

    def _seal_written(self) -> None:
        """Far reads: seal the full pages the step completed (their KV is written, the
        pins are ended), which finish() or seal_computed() would seal later anyway: a sealed
        page kvmmd swaps to the host tier is read there by the next steps, where an unsealed
        one would be faulted back in.  One that finds no room is left unsealed."""
        kvmm = self._kvmm
        tpp = self.tokens_per_page
        for e in self._batch:
            s = e.seq
            full = (e.start + len(e.new)) // tpp
            if s.lost or full <= s.sealed:
                continue
            try:
                self.c.seal(s.id, s.sealed, full - s.sealed)
                s.sealed = full
            except kvmm.OutOfMemoryError:
                pass
            except kvmm.PreemptedError:
                s.lost = True  # the next begin_step reports it
            except kvmm.KvmmDaemonGone:
                if self.reattach_timeout is None:
                    raise
                return  # the next begin_step reattaches

    def close(self):
        for s in list(self._seqs.values()):
            try:
                self.free(s)
            except self._kvmm.KvmmError:
                pass
        if self._own:
            self.c.close()

    # ---- kvmm's kernels -------------------------------------------------------------------
    def _attention_kernels(self, layer, q, k, v):
        K = self._k
        dev = self.device
        cpu = dev.type == "cpu"
        slots = self.slots if cpu else self.slots_dev
        table = self.table if cpu else self.table_dev
        K.reshape_and_cache(self.views, layer, k.float().contiguous().to(dev),
                            v.float().contiguous().to(dev), slots)
        qf = q.float().contiguous().to(dev)
        R = self._read  # the pool, or the far window (its frames are the pool's pages)
        if self.decode_only:
            out = K.paged_decode(R, layer, qf, table,
                                 self.ctx_lens if cpu else self.ctx_dev)
        else:
            out = K.paged_prefill(R, layer, qf, table,
                                  self.ctx_lens if cpu else self.ctx_dev,
                                  self.q_lens if cpu else self.qlen_dev)
        return out.to(q.device)

    # ---- the same in torch over the views ------------------------------------------------
    def _store(self, view, scales, x):
        if scales is None:
            view[self._frames, self._rows] = x.to(view.dtype)
            return
        g = self.fmt.quant_group
        xg = x.float().reshape(x.shape[0], self.kv_heads, self.head_dim // g, g)
        sc = xg.abs().amax(-1) / 127.0
        qx = torch.where(sc[..., None] > 0, xg / sc[..., None].clamp_min(1e-30),
                         torch.zeros_like(xg))
        view[self._frames, self._rows] = qx.round().clamp(-127, 127).to(torch.int8).reshape(
            x.shape[0], self.kv_heads, self.head_dim)
        scales[self._frames, self._rows] = sc

    def _load(self, view, scales, frames, n):
        x = view[frames]  # [..., blocks, tpp, kvh, hd]: a gather, a copy
        if scales is not None:
            g = self.fmt.quant_group
            x = (x.float().reshape(*x.shape[:-1], self.head_dim // g, g)
                 * scales[frames][..., None]).reshape(*x.shape)
        x = x.reshape(-1, self.kv_heads, self.head_dim)
        return x if n is None else x[:n]

    def _attention_torch(self, layer, q, k, v):
        V = self.views
        ks = V.k_scales[layer] if V.k_scales is not None else None
        vs = V.v_scales[layer] if V.v_scales is not None else None
        k, v, q = k.to(self.device), v.to(self.device), q.to(self.device)
        self._store(V.k[layer], ks, k)
        self._store(V.v[layer], vs, v)
        R = self._read  # reads through the pool's views, or the far window's
        if R is not V:
            ks = R.k_scales[layer] if R.k_scales is not None else None
            vs = R.v_scales[layer] if R.v_scales is not None else None
        if self.decode_only:
            return self._decode_torch(layer, q, ks, vs)
        out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        tpp = self.tokens_per_page
        row = 0
        for i, e in enumerate(self._batch):
            n = len(e.new)
            end = e.start + n
            frames = self.table[i, : -(-end // tpp)].long().to(self.device)
            kk = self._load(R.k[layer], ks, frames, end)
            vv = self._load(R.v[layer], vs, frames, end)
            out[row:row + n] = causal_attention(q[row:row + n], kk, vv, e.start)
            row += n
        return out

    def _decode_torch(self, layer, q, ks, vs):
        """One query per sequence: the whole batch's pages in one gather through the block
        table, attention masked past each context length (ks, vs: the scales of the views
        read, self._read)."""
        V = self._read
        tpp = self.tokens_per_page
        b, heads, d = q.shape
        kvh = self.kv_heads
        table = self.table.long().to(self.device)
        valid = table >= 0
        frames = table.clamp_min(0)
        kk = self._load(V.k[layer], ks, frames, None).reshape(b, -1, kvh, d)  # [b, T, kvh, d]
        vv = self._load(V.v[layer], vs, frames, None).reshape(b, -1, kvh, d)
        total = kk.shape[1]
        qf = q.float().view(b, kvh, heads // kvh, d)
        s = torch.einsum("bhgd,bthd->bhgt", qf, kk.float()) * (1.0 / math.sqrt(d))
        pos = torch.arange(total, device=self.device)
        ctx = self.ctx_lens.to(self.device).long()
        mask = (pos[None, :] >= ctx[:, None]) | ~valid.repeat_interleave(tpp, 1)[:, :total]
        s = s.masked_fill(mask[:, None, None, :], float("-inf"))
        p = torch.softmax(s, -1)
        return torch.einsum("bhgt,bthd->bhgd", p, vv.float()).reshape(b, heads, d)

    # ---- chunked: a part of each sequence pinned at a time ---------------------------------
    def _attention_chunked(self, layer, q, k, v):
        """Store the new K, V (their pages are pinned for the step), then for each sequence
        copy the layer's keys and values out of the pool self._chunk pages at a time (each
        chunk pinned only while it is copied) and attend over the copy once: with libkvmm's
        kernels, into scratch pages of the same layout (one layer's worth: PoolViews.scratch)
        that the paged kernels read; else into one tensor for the torch attention.  The same
        transient gather of one layer the whole-sequence torch path makes (_load): a chunk
        costs a pin and a copy, not a partial attention and a merge."""
        V = self.views
        ks = V.k_scales[layer] if V.k_scales is not None else None
        vs = V.v_scales[layer] if V.v_scales is not None else None
        k, v, q = k.to(self.device), v.to(self.device), q.to(self.device)
        self._store(V.k[layer], ks, k)
        self._store(V.v[layer], vs, v)
        out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        tpp, size = self.tokens_per_page, self._chunk
        row = 0
        for e in self._batch:
            n = len(e.new)
            end = e.start + n
            nb = -(-end // tpp)
            chunks = [(b, min(size, nb - b)) for b in range(0, nb, size)]
            if layer % 2:
                chunks.reverse()  # start where the last layer ended: it is still pinned
            st = self._scratch(nb)
            kk = vv = None
            ok = True
            for b0, cn in chunks:
                frames = self._chunk_frames(e.seq.id, b0, cn, nb)
                if frames is None:  # preempted meanwhile: its output is void (step_lost)
                    ok = False
                    break
                if st is not None:
                    st.k[0][b0:b0 + cn] = V.k[layer][frames]
                    st.v[0][b0:b0 + cn] = V.v[layer][frames]
                    if ks is not None:
                        st.k_scales[0][b0:b0 + cn] = ks[frames]
                        st.v_scales[0][b0:b0 + cn] = vs[frames]
                    continue
                ck = self._load(V.k[layer], ks, frames, None)
                cv = self._load(V.v[layer], vs, frames, None)
                if kk is None:
                    kk = torch.empty((nb * tpp,) + ck.shape[1:], dtype=ck.dtype,
                                     device=self.device)
                    vv = torch.empty_like(kk)
                kk[b0 * tpp:(b0 + cn) * tpp] = ck
                vv[b0 * tpp:(b0 + cn) * tpp] = cv
            if not ok:
                out[row:row + n] = 0
            elif st is not None:
                table = torch.arange(nb, dtype=torch.int32)[None]
                ctx = torch.tensor([end], dtype=torch.int32)
                qf = q[row:row + n].float().contiguous()
                if n == 1:
                    out[row:row + n] = self._k.paged_decode(st, 0, qf, table, ctx)
                else:
                    out[row:row + n] = self._k.paged_prefill(
                        st, 0, qf, table, ctx, torch.tensor([n], dtype=torch.int32))
            else:
                out[row:row + n] = causal_attention(q[row:row + n], kk[:end], vv[:end],
                                                    e.start)
            row += n
        return out

    def _scratch(self, nb: int):
        """Scratch pages for one layer of an nb-block sequence (kvmm.PoolViews.scratch, kept
        and grown), or None where the torch attention is used instead: no libkvmm kernels,
        not on the CPU, or no one-layer page layout with this pool's tokens a page."""
        if self._k is None or self.device.type != "cpu" or self._stage is False:
            return None
        if self._stage is None or self._stage.nr_frames < nb:
            size = max(nb, 2 * self._stage.nr_frames if self._stage is not None else 0)
            fmt1 = dataclasses.replace(self.fmt, layers=1)
            try:
                st = self._kvmm.PoolViews.scratch(fmt1, self.views.page_size // self.layers,
                                                  size)
            except ValueError:
                st = None
            if st is None or st.tokens_per_page != self.tokens_per_page:
                self._stage = False
                return None
            self._stage = st
        return self._stage

    def _chunk_frames(self, sid, b0, cn, nb):
        """Pin blocks [b0, b0 + cn) of sequence sid (_pin_chunk: held until the next chunk
        or end_step) and return their frames (a LongTensor on the device); None if kvmmd
        preempted the sequence (it is then in step_lost())."""
        kvmm = self._kvmm
        try:
            self._pin_chunk(sid, b0, cn)
        except kvmm.PreemptedError:
            # kvmmd took it while the step ran: no output for it (the engine drops the
            # sequence after the step, step_lost()), nothing pinned
            s = self._seqs[sid]
            if not s.lost:
                s.lost = True
                self._lost_in_step.append(s)
            return None
        except kvmm.OutOfMemoryError:
            raise KVOutOfMemory(f"kvmm namespace {self.c.ns}: no room for a chunk of {cn} "
                                f"pages") from None
        self.stats["chunks"] += 1
        row = self.c.block_table([sid], nb)[0, b0:b0 + cn].long()
        if bool((row < 0).any()):
            raise RuntimeError(f"kvmm: sequence {sid}: a pinned block has no frame")
        return row.to(self.device)

    def _pin_chunk(self, sid: int, b0: int, cn: int) -> None:
        """Make blocks [b0, b0 + cn) of sid the chunk held pinned: nothing to do when it is
        already (the layer before ended on it); else end the held chunk's pin and take this
        one in one submission (kvmm_submit of SEQ_UNPIN_RANGE and SEQ_PIN_RANGE: one wake-up
        of kvmmd, not two round trips). Raises the pin's KvmmError (PreemptedError,
        OutOfMemoryError); nothing is held then."""
        want = (sid, b0, cn)
        if self._held == want:
            return
        held, self._held = self._held, None
        if not self._batched_pins:
            if held is not None:
                try:
                    self.c.unpin_range(*held)
                except self._kvmm.PreemptedError:
                    pass
            self.c.pin_range(sid, b0, cn)
            self._held = want
            return
        ops = ([(False, held)] if held is not None else []) + [(True, want)]
        err = self._range_ops(ops)[-1]
        if err is not None and err.errno == errno.EINVAL:
            # a libkvmm without range pins in kvmm_submit completes them with EINVAL (a
            # wrong range too): from now on one call each (which says which it was)
            self._batched_pins = False
            self.c.pin_range(sid, b0, cn)
        elif err is not None:
            raise err
        self._held = want

    def _range_ops(self, ops: List[tuple]) -> List[Optional[Exception]]:
        """Submit range pins and unpins ((pin?, (seq id, block, blocks)) each) as one batch
        and reap them: their errors (None for success; an unpin whose sequence was
        preempted counts as done). Preemption events met on the way mark sequences lost."""
        kvmm = self._kvmm
        sqes = [kvmm.Sqe(kvmm.Op.PIN_RANGE if pin else kvmm.Op.UNPIN_RANGE, seq=r[0], arg=r[1],
                         nr=r[2], user_data=_RANGE_TAG + i)
                for i, (pin, r) in enumerate(ops)]
        n = self.c.submit(sqes)
        errs: List[Optional[Exception]] = [None] * len(ops)
        for i in range(n, len(ops)):
            errs[i] = kvmm.errors.make_error(-errno.EAGAIN, "kvmm_submit")  # not taken
        done = 0
        while done < n:
            for cqe in self.c.complete(max(64, n), 1):
                if cqe.is_event:
                    s = self._seqs.get(cqe.seq)
                    if s is not None and not s.lost:
                        s.lost = True
                        self.stats["preempt_events"] += 1
                    continue
                i = cqe.user_data - _RANGE_TAG
                if not 0 <= i < len(ops):
                    continue  # not ours (nothing else is in flight between two steps)
                done += 1
                if cqe.res < 0 and not (cqe.preempted and not ops[i][0]):
                    errs[i] = cqe.error()
        return errs


def partial_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qpos: int, kpos: int):
    """Attention of q [n, H, D] (positions qpos..qpos+n-1) over one chunk of keys k, v
    [m, KVH, D] (positions kpos..kpos+m-1), each query seeing the keys up to its own position.
    Returns the chunk's normalised output [KVH, g, n, D] and its log-sum-exp [KVH, g, n]
    (-inf, with a zero output, for a query that sees no key of the chunk), in fp32: the
    partials of all chunks merge (merge_partials) into exactly the attention over all keys."""
    n, heads, d = q.shape
    m, kvh = k.shape[0], k.shape[1]
    g = heads // kvh
    qf = q.float().view(n, kvh, g, d).permute(1, 2, 0, 3)  # [KVH, g, n, D]
    kf = k.float().permute(1, 2, 0)[:, None]  # [KVH, 1, D, m]
    vf = v.float().permute(1, 0, 2)[:, None]  # [KVH, 1, m, D]
    s = torch.matmul(qf, kf) * (1.0 / math.sqrt(d))  # [KVH, g, n, m]
    if kpos + m - 1 > qpos:  # some key lies after some query
        kp = torch.arange(kpos, kpos + m, device=q.device)[None, :]
        qp = torch.arange(qpos, qpos + n, device=q.device)[:, None]
        s = s.masked_fill(kp > qp, float("-inf"))
    lse = torch.logsumexp(s, -1)  # [KVH, g, n]
    p = torch.exp(s - lse[..., None])
    p = torch.where(torch.isfinite(lse)[..., None], p, torch.zeros_like(p))
    return torch.matmul(p, vf), lse


def merge_partials(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor):
    """Two chunks' partial attention (partial_attention) as one: the online-softmax merge,
    exact up to rounding. A side with lse -inf (no key seen) weighs nothing."""
    lse = torch.logaddexp(lse1, lse2)
    ok = torch.isfinite(lse)
    w1 = torch.where(ok, torch.exp(lse1 - lse), torch.zeros_like(lse))
    w2 = torch.where(ok, torch.exp(lse2 - lse), torch.zeros_like(lse))
    return o1 * w1[..., None] + o2 * w2[..., None], lse
