"""Several Python threads at once: the same bits as one at a time, and the GIL is released while
the library computes."""

import threading
import time

import numpy as np

import detattn

from conftest import seeded


def test_concurrent_calls_give_the_same_bits():
    problems = [seeded((2, 4, 2, 33, 100, 64), dt, s, mask="per-batch") for s, dt in enumerate(["f32", "f16", "bf16"] * 2)]
    want = [detattn.attention(x["q"], x["k"], x["v"], causal=True, attn_mask=x["mask"]).tobytes() for x in problems]
    errors, got = [], {}

    def work(t):
        try:
            for rep in range(10):
                i = (t + rep) % len(problems)
                x = problems[i]
                out = detattn.attention(x["q"], x["k"], x["v"], causal=True, attn_mask=x["mask"])
                got.setdefault(i, set()).add(out.tobytes())
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(got[i] == {want[i]} for i in got) and len(got) == len(problems)


def test_the_gil_is_released_while_computing():
    # A call of ~0.1 s in a thread, timed there; the main thread meanwhile records the time of
    # each turn of a loop. Were the GIL held for the call, no turn could fall inside it (checked
    # by planting the release out: 0 turns); released, there are many (seen: ~10^5).
    x = seeded((1, 8, 8, 2048, 2048, 64), "f32", 1)
    detattn.attention(x["q"], x["k"], x["v"])  # warm up
    done, window = threading.Event(), []

    def work():
        t0 = time.perf_counter()
        detattn.attention(x["q"], x["k"], x["v"])
        window.append((t0, time.perf_counter()))
        done.set()

    t = threading.Thread(target=work)
    turns = []
    t.start()
    while not done.is_set():
        turns.append(time.perf_counter())
    t.join()
    (a, b), margin = window[0], 0.01  # leave out the Python around the native call
    assert b - a > 3 * margin, "the call is too short to tell"
    inside = sum(a + margin < x < b - margin for x in turns)
    assert inside > 100, (inside, b - a)
