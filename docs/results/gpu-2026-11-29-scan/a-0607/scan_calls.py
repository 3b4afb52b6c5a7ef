# Reject device calls for compute-sanitizer: the TensorCore scan on contiguous and paged caches, every
# head dim, a NaN found (the call raises), finite calls returning.
import sys, torch, detattn
g = torch.Generator(device="cuda").manual_seed(3)
ok = bad = 0
for D, dt in ((64, torch.float16), (128, torch.bfloat16), (256, torch.float16)):
    B, Hq, Hkv, S = 2, 8, 2, 5000
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=dt, generator=g)
    k = torch.randn(B, S, Hkv, D, device="cuda", dtype=dt, generator=g)
    v = torch.randn(B, S, Hkv, D, device="cuda", dtype=dt, generator=g)
    detattn.attention_with_kvcache(q, k, v, cache_seqlens=[5000, 3001], path="tensorcore"); ok += 1
    # paged: 16-row pages in a shuffled order
    P = 16; pages = B * ((S + P - 1) // P)
    kp = torch.randn(pages, P, Hkv, D, device="cuda", dtype=dt, generator=g)
    vp = torch.randn(pages, P, Hkv, D, device="cuda", dtype=dt, generator=g)
    table = torch.randperm(pages, generator=torch.Generator().manual_seed(D)).reshape(B, -1).int()
    detattn.attention_with_kvcache(q, kp, vp, cache_seqlens=[4999, 77], block_table=table, path="tensorcore"); ok += 1
    k2 = k.clone(); k2[1, 4321, 1, D - 1] = float("nan")
    try:
        detattn.attention_with_kvcache(q, k2, v, cache_seqlens=5000, path="tensorcore")
    except Exception as e:  # noqa: BLE001
        bad += 1; print(D, "NaN in k:", str(e)[:80])
torch.cuda.synchronize()
print(f"finite calls {ok}, refused {bad}")
sys.exit(0 if (ok, bad) == (6, 3) else 1)
