"""The minibatch targets of issue 19 and Figure 1(a)'s θ = 0-first verdicts, on synthetic
tables (the builders are what write the committed claims)."""

from __future__ import annotations

from reproductions.gpope import minibatch_chain as mb
from reproductions.gpope.chain_claims import fig1a_claims

ZERO = 0.0367
MS = (100, 200, 500, 1000, 2000, 5000)


def _table(gp: float, mb1: dict[int, float], mb01: dict[int, float]) -> dict:
    def st(v: float) -> dict:
        return {"mean": v, "std": 0.0, "se": 0.0, "n": 20}

    t = {}
    for m in MS:
        t[(m, "GP (1× step)")] = st(gp)
        t[(m, "GP (0.1× step)")] = st(gp)
        t[(m, "GP (10× step)")] = st(gp)
        t[(m, "V1 (DP-LSW)")] = st(1e9)
        t[(m, "V2 (DP-LSL)")] = st(1e8)
        t[(m, "LSTD (non-private)")] = st(4e-7)
        t[(m, mb.method(1.0))] = st(mb1[m])
        t[(m, mb.method(0.1))] = st(mb01[m])
    return t


def test_targets_pass_and_fail_at_their_thresholds():
    good1 = {100: 0.01, 200: 0.4 * ZERO, 500: 0.005, 1000: 0.09 * ZERO, 2000: 1e-4, 5000: 1e-4}
    good01 = dict.fromkeys(MS, 0.9 * ZERO)
    claims = fig1a_claims(_table(ZERO, good1, good01), MS, ZERO)
    verdicts = [c.verdict for c in claims.items]
    # paper-mode GP equals θ = 0: it does not beat it, and the V1/V2 comparisons are vacuous
    assert verdicts[:3] == ["does not hold", "inconclusive", "inconclusive"]
    assert verdicts[3:] == ["holds"] * 4
    assert "× LSTD's" in claims.items[-1].ours
    bad1 = {**good1, 200: 0.6 * ZERO, 1000: 0.2 * ZERO, 5000: ZERO / 20}
    bad01 = {**good01, 500: 1.1 * ZERO}
    claims = fig1a_claims(_table(0.5 * ZERO, bad1, bad01), MS, ZERO)
    verdicts = [c.verdict for c in claims.items]
    assert verdicts[:3] == ["holds", "holds", "holds"]
    assert verdicts[3:] == ["does not hold"] * 4
