"""``attention_with_kvcache`` on the CPU. The promise: a KV cache, paged or not, gives bit for bit
the output and log-sum-exp of :func:`detattn.attention` on the same keys laid out contiguously
with ``kv_lens=cache_seqlens`` (a paged cache is a layout). Held here for every dtype, head dims
64, 128 and 3, GQA and MQA, page sizes 16 and 256 in shuffled page order with the rows no sequence
uses NaN, key lengths 0, 1 and a page boundary ±1, causal or not; for a contiguous cache; for a
packed batch (``cu_seqlens_q``: each sequence's ``attention_varlen`` bits) and a mask. Every bad
argument is a ``ValueError`` naming it, with ``out`` untouched."""

import numpy as np
import pytest

import detattn
from detattn.inputs import paginate

from conftest import rand


def u8(a):
    return np.ascontiguousarray(a).view(np.uint8)


def kv(b, hkv, skv, d, dt, rng):
    """K and V as `paginate` takes them, contiguous [B, Hkv, Skv, D]."""
    return rand((b, hkv, skv, d), dt, rng), rand((b, hkv, skv, d), dt, rng)


def setup(lens, dt, dims, page, seed):
    """A problem of `lens` keys per sequence, `dims` = (Sq, Hq, Hkv, D): q [B, Sq, Hq, D],
    contiguous K and V [B, Hkv, max(lens), D], and their paged cache (pages, block table)."""
    sq, hq, hkv, d = dims
    rng = np.random.default_rng(seed)
    q = rand((len(lens), sq, hq, d), dt, rng)
    k, v = kv(len(lens), hkv, max(lens), d, dt, rng)
    return (q, k, v, *paginate(k, v, page, seed=seed, kv_lens=lens))


def bshd(x):
    """A [B, H, S, D] array seen as [B, S, H, D] (a view)."""
    return x.transpose(0, 2, 1, 3)


def padded(x, skv, rng):
    """`x` ([B, H, S, D]) in a longer cache of `skv` rows, the extra rows random: keys past each
    sequence's length must not matter."""
    b, h, s, d = x.shape
    y = rand((b, h, skv, d), "f32", rng).astype(x.dtype)
    y[:, :, :s] = x
    return y


DTYPES_DIMS = [(dt, d) for dt in ("f32", "f16", "bf16") for d in (64, 128, 3)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("page", [16, 256])
@pytest.mark.parametrize("dt,d", DTYPES_DIMS, ids=[f"{dt}-d{d}" for dt, d in DTYPES_DIMS])
def test_paged_is_the_contiguous_bits(dt, d, page, causal):
    rng = np.random.default_rng(page + d + len(dt))
    # GQA (4 query heads on 2) or MQA (on 1); lengths 0, 1, a page boundary ±1 and two full pages.
    hq, hkv = (4, 2) if d != 128 else (4, 1)
    lens = [2 * page + 1, 1, 0, page - 1, page]
    b, sq, skv = len(lens), 3, max(lens)
    q = rand((b, sq, hq, d), dt, rng)
    k, v = kv(b, hkv, skv, d, dt, rng)
    kp, vp, table = paginate(k, v, page, seed=page * 7 + d, kv_lens=lens)
    used = table[table >= 0]
    assert sorted(used) != list(used), "the pages should be in shuffled order"
    got, lse = detattn.attention_with_kvcache(
        q, kp, vp, cache_seqlens=np.array(lens, np.int32), block_table=table, causal=causal, return_lse=True
    )
    assert got.shape == q.shape and lse.shape == (b, hq, sq) and lse.dtype == np.float32
    # The same keys contiguous: exactly Skv = max(lens) rows, and in a longer cache (the paged
    # cache's capacity plus some).
    for skv_c in (skv, table.shape[1] * page + 5):
        want, want_lse = detattn.attention(
            q, bshd(padded(k, skv_c, rng)), bshd(padded(v, skv_c, rng)), layout="bshd", kv_lens=lens,
            causal=causal, return_lse=True,
        )
        assert np.array_equal(u8(got), u8(want)), skv_c
        assert np.array_equal(lse.view(np.uint32), want_lse.view(np.uint32)), skv_c
    # A contiguous cache ([B, Skv, Hkv, D]) through the same function, and without the lse.
    flat = detattn.attention_with_kvcache(q, bshd(k), bshd(v), cache_seqlens=lens, causal=causal)
    assert np.array_equal(u8(flat), u8(got))
    # The zero-length sequence's rows are zeros, its log-sum-exp −inf.
    assert not np.asarray(got[2], np.float32).any() and np.all(lse[2] == -np.inf)


def test_top_left_scale_and_out_in_place():
    lens = [40, 17]
    q, k, v, kp, vp, table = setup(lens, "f16", (20, 4, 2, 64), 16, seed=11)
    opts = dict(causal=True, causal_align="top-left", scale=0.3)
    out = np.full(q.shape, 7.0, np.float16)
    got = detattn.attention_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table.tolist(), out=out, **opts)
    assert got is out
    want = detattn.attention(q, bshd(k), bshd(v), layout="bshd", kv_lens=lens, **opts)
    assert np.array_equal(u8(out), u8(want))


def test_one_length_for_every_sequence():
    # An int cache_seqlens, as FlashAttention takes it.
    q, k, v, kp, vp, table = setup([50] * 3, "bf16", (1, 2, 2, 64), 32, seed=12)
    got = detattn.attention_with_kvcache(q, kp, vp, cache_seqlens=50, block_table=table)
    want = detattn.attention(q, bshd(k), bshd(v), layout="bshd")
    assert np.array_equal(u8(got), u8(want))


def test_a_mask_with_a_paged_cache():
    # The mask's last dimension is Skv = max(cache_seqlens) for a paged cache.
    lens = [30, 9]
    q, k, v, kp, vp, table = setup(lens, "f32", (5, 4, 4, 64), 16, seed=13)
    mask = np.random.default_rng(5).uniform(size=(2, 4, 5, 30)) < 0.7
    got = detattn.attention_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, attn_mask=mask)
    want = detattn.attention(q, bshd(k), bshd(v), layout="bshd", kv_lens=lens, attn_mask=mask)
    assert np.array_equal(u8(got), u8(want))


def test_a_packed_batch_in_a_paged_cache():
    # cu_seqlens_q (FlashAttention 3's): decode rows beside a prefill, a sequence without rows and
    # one without keys; each sequence's rows and log-sum-exp are attention_varlen's.
    rng = np.random.default_rng(14)
    lq, lk = [1, 7, 0, 3], [40, 0, 17, 300]
    cq, ck = [0, *np.cumsum(lq).tolist()], [0, *np.cumsum(lk).tolist()]
    q = rand((sum(lq), 4, 64), "f16", rng)
    k, v = kv(1, 2, sum(lk), 64, "f16", rng)
    kp, vp, table = paginate(k, v, 16, seed=6, cu_seqlens_k=ck)
    got, lse = detattn.attention_with_kvcache(
        q, kp, vp, cache_seqlens=lk, block_table=table, cu_seqlens_q=cq, causal=True, return_lse=True
    )
    want, want_lse = detattn.attention_varlen(
        q, bshd(k)[0], bshd(v)[0], cq, ck, causal=True, return_lse=True
    )
    assert got.shape == q.shape and lse.shape == (4, sum(lq))
    assert np.array_equal(u8(got), u8(want))
    assert np.array_equal(lse.view(np.uint32), want_lse.view(np.uint32))


def test_only_the_rows_in_use_are_read():
    # paginate fills every unused row with NaN and the calls above pass under "reject"; a NaN in a
    # used row is the library's NonFiniteError naming the tensor.
    lens = [20, 5]
    q, _, _, kp, vp, table = setup(lens, "f32", (1, 2, 2, 64), 16, seed=15)
    vp[table[1, 0], 4, 1, 3] = np.inf  # sequence 1, key 4 (its last), kv head 1
    out = np.full(q.shape, 7.0, np.float32)
    with pytest.raises(detattn.NonFiniteError) as e:
        detattn.attention_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, out=out)
    assert e.value.tensor == "v"
    assert np.all(out == 7.0)
    vp[table[1, 0], 5, 1, 3] = np.inf  # key 5 of sequence 1: past its length, never read
    vp[table[1, 0], 4, 1, 3] = 0.0
    detattn.attention_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table)


def _case():
    lens = [40, 3]
    q, _, _, kp, vp, table = setup(lens, "f32", (2, 4, 2, 64), 16, seed=16)
    return q, kp, vp, table, lens


def _bad_table_entry(table, value):
    t = table.copy()
    t[0, 1] = value
    return t


ERRORS = [
    # (what, change the arguments, message)
    ("entry out of range", lambda a: a.update(block_table=_bad_table_entry(a["block_table"], 99)),
     r"block_table\[0\]\[1\] is 99, not a page of the cache"),
    ("negative entry in use", lambda a: a.update(block_table=_bad_table_entry(a["block_table"], -1)),
     r"block_table\[0\]\[1\] is -1"),
    ("table too short", lambda a: a.update(block_table=a["block_table"][:, :2]),
     r"sequence 0 has 40 keys, more than its block-table row holds \(2 pages of 16 = 32\)"),
    ("table rows", lambda a: a.update(block_table=a["block_table"][:1]), r"block_table must have one row per sequence"),
    ("table dtype", lambda a: a.update(block_table=a["block_table"].astype(np.float32)),
     r"block_table must hold integers .*float32"),
    ("table rank", lambda a: a.update(block_table=a["block_table"].ravel()), r"block_table must be 2-D"),
    ("table entry past int32", lambda a: a.update(block_table=[[0, 2**31, 1], [2, 3, 4]]),
     r"block_table entries must fit in int32"),
    ("page size", lambda a: a.update(k_cache=a["k_cache"][:, :12], v_cache=a["v_cache"][:, :12]),
     r"page_size must be a power of two in 16..=256, got 12"),
    ("page size 24", lambda a: a.update(k_cache=np.zeros((9, 24, 2, 64), np.float32),
                                        v_cache=np.zeros((9, 24, 2, 64), np.float32)),
     r"page_size must be a power of two in 16..=256, got 24"),
    ("cache shapes", lambda a: a.update(v_cache=a["v_cache"][:-1]), r"k_cache and v_cache must have the same shape"),
    ("cache rank", lambda a: a.update(k_cache=a["k_cache"][0]), r"k_cache must be 4-D"),
    ("q rank", lambda a: a.update(q=a["q"][0]), r"q must be 4-D \[B, Sq, Hq, D\]"),
    ("q dtype", lambda a: a.update(q=a["q"].astype(np.int32)), r"q has dtype int32"),
    ("cache dtype", lambda a: a.update(v_cache=a["v_cache"].astype(np.float16)),
     r"v_cache has dtype float16 and q float32: q, k_cache and v_cache must have one dtype"),
    ("head dims", lambda a: a.update(k_cache=a["k_cache"][..., :32], v_cache=a["v_cache"][..., :32]),
     r"q and k_cache must have the same head_dim"),
    ("lengths count", lambda a: a.update(cache_seqlens=[40]), r"cache_seqlens must have one entry per sequence \(2\)"),
    ("lengths sign", lambda a: a.update(cache_seqlens=[40, -1]), r"cache_seqlens must be non-negative"),
    ("lengths dtype", lambda a: a.update(cache_seqlens=np.array([40.0, 3.0])), r"cache_seqlens must hold integers"),
    ("packed without pages", lambda a: a.update(q=a["q"][0], cu_seqlens_q=[0, 2], block_table=None),
     r"cu_seqlens_q takes a paged cache"),
    # (Checked past attention_with_kvcache's own checks, by the path every call takes: the
    # message still names the caller's argument.)
    ("cache head_dim strided", lambda a: a.update(k_cache=np.repeat(a["k_cache"], 2, axis=3)[..., ::2]),
     r"k_cache's last dimension \(head_dim\) must be contiguous"),
]


@pytest.mark.parametrize("what,change,message", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_arguments_name_themselves_and_write_nothing(what, change, message):
    q, kp, vp, table, lens = _case()
    args = dict(q=q, k_cache=kp, v_cache=vp, cache_seqlens=lens, block_table=table)
    change(args)
    out = np.full(q.shape, 7.0, np.float32)
    with pytest.raises(ValueError, match=message):
        detattn.attention_with_kvcache(args.pop("q"), args.pop("k_cache"), args.pop("v_cache"), out=out, **args)
    assert np.all(out == 7.0), what


def test_a_contiguous_cache_checks_its_lengths():
    rng = np.random.default_rng(17)
    q = rand((2, 1, 2, 64), "f32", rng)
    k = rand((2, 30, 2, 64), "f32", rng)
    with pytest.raises(ValueError, match=r"cache_seqlens must be at most the cache's length Skv = 30"):
        detattn.attention_with_kvcache(q, k, k, cache_seqlens=[30, 31])
    with pytest.raises(ValueError, match=r"k_cache must have q's batch size"):
        detattn.attention_with_kvcache(q, k[:1], k[:1], cache_seqlens=[30, 3])
