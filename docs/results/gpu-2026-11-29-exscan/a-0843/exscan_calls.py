# Exact Reject device calls for compute-sanitizer: a decode's scan of the caller's rows
# (detattn_scan_*) on contiguous, strided (a view into wider rows), odd-offset and paged caches,
# every dtype; NaN in q, k and v refused; finite calls return.
import sys, torch, detattn
g = torch.Generator(device="cuda").manual_seed(5)
ok = bad = 0
for D, dt in ((128, torch.bfloat16), (64, torch.float16), (256, torch.float32), (36, torch.float16)):
    B, Hq, Hkv, S = 2, 8, 2, 3000
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=dt, generator=g)
    k = torch.randn(B, S, Hkv, D, device="cuda", dtype=dt, generator=g)
    v = torch.randn(B, S, Hkv, D, device="cuda", dtype=dt, generator=g)
    detattn.attention_with_kvcache(q, k, v, cache_seqlens=[3000, 1234], path="exact"); ok += 1
    # strided: each row inside a wider one (gaps of NaN), and shifted by one element
    wide = torch.full((B, S, Hkv, D + 9), float("nan"), device="cuda", dtype=dt)
    wide[:, :, :, 1:D + 1] = k
    detattn.attention_with_kvcache(q, wide[:, :, :, 1:D + 1], v, cache_seqlens=3000, path="exact"); ok += 1
    P = 16; pages = B * ((S + P - 1) // P)
    kp = torch.randn(pages, P, Hkv, D, device="cuda", dtype=dt, generator=g)
    vp = torch.randn(pages, P, Hkv, D, device="cuda", dtype=dt, generator=g)
    table = torch.randperm(pages, generator=torch.Generator().manual_seed(D)).reshape(B, -1).int()
    detattn.attention_with_kvcache(q, kp, vp, cache_seqlens=[2999, 77], block_table=table, path="exact"); ok += 1
    for t in range(3):
        x = [q.clone(), k.clone(), v.clone()]
        x[t].view(-1)[-1] = float("nan")
        try:
            detattn.attention_with_kvcache(*x, cache_seqlens=3000, path="exact")
        except Exception as e:  # noqa: BLE001
            bad += 1; print(D, "NaN in", "qkv"[t], ":", str(e)[:60])
torch.cuda.synchronize()
print(f"finite calls {ok}, refused {bad}")
sys.exit(0 if (ok, bad) == (12, 12) else 1)
