"""Helper process for the ledger's crash and concurrency tests (not a test module).

usage: python ledger_writer.py LEDGER COUNT NOISE_MULTIPLIER [--go FILE] [--kill-at-replace K]
                        [--reserve]

Prints "ready" once imported (then waits at the barrier, if any), and records COUNT
identical small Gaussian spends on the ledger. After each `record` returns it
prints "ok RUN_ID" (or "refused" when the budget is exhausted) and flushes, so the parent
knows every spend the writer believes durable. `--go FILE` waits until FILE exists (a start
barrier for concurrent writers). `--kill-at-replace K` SIGKILLs the process itself inside the
K-th `os.replace` call, i.e. after the temp file is written and fsynced but before the rename.
`--reserve` spends as a run does: `reserve`, then `complete` (it prints "ok RUN_ID" once both
returned; a refusal can only come from the reservation).
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from dp_accounting import dp_event

from privrl.privacy.ledger import BudgetExceededError, BudgetLedger
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("count", type=int)
    parser.add_argument("noise_multiplier", type=float)
    parser.add_argument("--go")
    parser.add_argument("--kill-at-replace", type=int, default=0)
    parser.add_argument("--reserve", action="store_true")
    args = parser.parse_args()

    ledger = BudgetLedger.load(args.ledger, verify=False)

    release = Release(
        "step",
        "gaussian",
        1.0,
        "l2",
        {"sigma": args.noise_multiplier},
        event=dp_event.GaussianDpEvent(args.noise_multiplier),
    )
    report = PrivacyReport.build(
        ledger.unit, ledger.relation, [release], ledger.delta, system="writer"
    )

    if args.kill_at_replace:
        real_replace = os.replace
        calls = 0

        def replace(src, dst):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            if calls == args.kill_at_replace:
                os.kill(os.getpid(), signal.SIGKILL)
            real_replace(src, dst)

        os.replace = replace

    print("ready", flush=True)
    if args.go:
        while not os.path.exists(args.go):
            time.sleep(0.002)
    for i in range(args.count):
        try:
            if args.reserve:
                entry = ledger.reserve(report, label=f"spend {i}")
                ledger.complete(entry.run_id, report)
            else:
                entry = ledger.record(report, label=f"spend {i}")
        except BudgetExceededError:
            print("refused", flush=True)
        else:
            print("ok", entry.run_id, flush=True)


if __name__ == "__main__":
    main()
