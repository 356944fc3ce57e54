"""The aimed and independence tests read kept distributions in vectorised blocks; each row must equal the
row's own kept distribution (its top ``kept`` tokens at its temperature), whatever block it falls in."""

from __future__ import annotations

import numpy as np


def test_blocks_equal_each_rows_kept_distribution():
    from ikdata.sampling.aimed import kept_blocks, kept_of

    rng = np.random.default_rng(8)
    n, vocab = 60, 3000
    x = rng.standard_normal((n, vocab)) * 2
    x[5, :100] = -np.inf  # banned tokens
    kept = rng.choice([1, 7, 64, 65, 900, 1024, 1025, 2500, vocab], n)
    kept[5] = vocab - 100  # every finite token
    temperature = rng.uniform(0.5, 1.5, n)
    warped_ids = {3: np.array([9, 4, 1])}
    warped_probs = {3: np.array([0.5, 0.3, 0.2])}
    seen = set()
    for rows, ids, probs in kept_blocks(x, kept, temperature, np.arange(n), warped_ids, warped_probs, width=1024):
        for j, i in enumerate(rows):
            seen.add(int(i))
            got = dict(zip(ids[j].tolist(), probs[j].tolist()))
            got = {t: p for t, p in got.items() if p > 0}
            if i == 3:
                assert got == {9: 0.5, 4: 0.3, 1: 0.2}
                continue
            want_ids, want_probs = kept_of(x[i], int(kept[i]), float(temperature[i]))
            want = dict(zip(want_ids.tolist(), want_probs.tolist()))
            assert set(got) == set(want), (i, kept[i])
            assert max(abs(got[t] - want[t]) for t in want) < 1e-9
    assert seen == set(range(n))
