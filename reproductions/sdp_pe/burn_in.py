"""When a private run of the Fig. 4 study can first change its plan: the burn-in of
DP-UCBVI-LDP and the generic first-crossing search, computed from public quantities only
(H, S, A, K, ε, β and the bonus scale)."""

from __future__ import annotations

import math
from collections.abc import Callable


def first_time(need: Callable[[int], float], limit: int) -> int | None:
    """Smallest t ≤ limit with need(t) < t (need non-decreasing in the cases used), by
    doubling then bisection on integers."""
    if need(limit) >= limit:
        return None
    lo, hi = 0, 1
    while need(hi) >= hi:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) < mid:
            hi = mid
        else:
            lo = mid
    return hi


def ldp_burn_in_end(
    H: int,
    S: int,
    A: int,
    episodes: int,
    epsilon: float,
    *,
    bonus_scale: float = 1.0,
    beta: float = 0.1,
) -> int | None:
    """Earliest episode t at which a DP-UCBVI-LDP run of ``episodes`` episodes can use any row,
    on the event (probability ≥ 1 − β) that every raw noisy count is within E/4 of the truth;
    None if not before 10¹³.

    A row (h, s, a) changes the plan only if C·(H·S·E·ι + H²·S·ι) < H·ñ⁺ with
    ñ⁺ = max(n̂, 0) + 3E/4 ≤ n + E (`unusable_rows`), and n ≤ t; E = 4·(the Laplace-sum bound of
    t users at Laplace(6H/ε), β over every counter of every release), ι = ln(2HSAK/β). Before
    t, Q̃ = H − h everywhere and the greedy plan is action 0 everywhere (all-left)."""
    from privrl.privacy.tree import laplace_sum_bound

    K = int(episodes)
    iota = math.log(2 * H * S * A * K / beta)
    d = 2 * H * S * A + H * S * A * S
    beta_c = beta / (K * d)
    b = 6 * H / epsilon
    C = float(bonus_scale)

    def need(t: int) -> float:
        E = 4 * laplace_sum_bound(b, t, beta_c)
        return C * (H * S * E * iota + H * H * S * iota) / H - E

    return first_time(need, 10**13)
