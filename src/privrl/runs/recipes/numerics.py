"""Machine-independent numerics for recipe builds: the same dataset from any Intel x86-64 machine.

A recipe dataset is the input of reproduction cells that run for hours and continue across
machines (a committed cell resumes only on a dataset with the recorded ``content_sha256``). A
build trains agents with torch, and torch's CPU kernels are chosen by the machine: ATen
dispatches its vectorised loops to the widest instruction set the CPU has (AVX-512 or AVX2)
and MKL picks its GEMM code path the same way, so two machines sum in different orders and,
after thousands of SGD steps, train different agents and record different datasets. (Seen:
the Balance dataset rebuilt on an AVX-512 machine differed from the committed cells' while its
uniform-random reference return, which uses no torch, agreed to every digit.)

A full build therefore runs in a child process whose environment pins both choices before
torch loads (`PINNED_ENV`): ATen's kernels at AVX2 and MKL's conditional numerical
reproducibility at AVX2 in strict mode, which is also independent of the thread count. Any
Intel AVX2 machine then computes what any other does (one thread, as every build runs). The cost
is speed: a 256×256 GEMM takes about 1.6× as long as unpinned.

Not across CPU vendors. On an AMD CPU, MKL ignores every ``MKL_CBWR`` branch but
``COMPATIBLE``: a pinned training gave the same weights under AVX2, AVX, SSE4_2, AVX512 and
AUTO on an AMD EPYC, other weights under COMPATIBLE, and a pinned quick Pendulum build gave
``content_sha256`` 91b51d89… where the Intel machines gave 087a50e1… (and the full Balance
build's expert returned 984.5, not 831.7). ``COMPATIBLE`` is MKL's one branch shared by all
vendors, at 3.5× the GEMM time of the AVX2 branch (256×256, measured on that AMD EPYC), so
builds keep the AVX2 branch and `vendor_note` says why a rebuild on another vendor's CPU does
not match.

Quick builds (tests, smoke runs) run in-process, unpinned. The numerics a build ran with are
part of every stage fingerprint (`tag`), so a stage built under other numerics is rebuilt,
never mixed in, and are recorded in the dataset's recipe metadata (`describe`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["PINNED_ENV", "cpu_vendor", "describe", "is_pinned", "run_pinned", "tag", "vendor_note"]

PINNED_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",  # ATen's vectorised kernels (read once, when torch loads)
    "MKL_CBWR": "AVX2,STRICT",  # MKL's GEMM path; STRICT: independent of the thread count
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's kernels, where torch uses them
}


def is_pinned() -> bool:
    """Whether this process was started with the pinned numerics."""
    return all(os.environ.get(k) == v for k, v in PINNED_ENV.items())


def describe() -> dict[str, Any]:
    """The numerics this process computes with (public: the machine's, not the data's)."""
    import torch

    return {
        "pinned": is_pinned(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
        "torch": torch.__version__,
    }


def cpu_vendor() -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``; "" where not known)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def vendor_note() -> str:
    """Why this machine may not rebuild a dataset that an Intel machine built ("" on Intel)."""
    vendor = cpu_vendor()
    if vendor in ("GenuineIntel", ""):
        return ""
    return (
        f"this machine's CPU is {vendor}: MKL ignores the pinned MKL_CBWR=AVX2 branch there, "
        "so its builds differ from an Intel machine's; a dataset built on an Intel x86-64 "
        "machine is rebuilt identically on another Intel machine with AVX2"
    )


def tag() -> str:
    """A short name of this process's numerics, mixed into every stage fingerprint."""
    d = describe()
    return f"{d['cpu_capability']}|{d['mkl_cbwr']}|{d['torch']}"


def run_pinned(name: str, data_dir: Path, *, seed: int, quick: bool, progress: bool) -> Path:
    """Build recipe `name` in a child process with `PINNED_ENV`; returns the dataset's path.

    The child shares this process's terminal (its progress shows as usual); an error it
    raises comes back as the same kind of error here, with its message."""
    with tempfile.TemporaryDirectory(prefix="privrl-recipe-") as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", __name__, name, str(data_dir), str(result)]
        cmd += ["--seed", str(seed)] + ["--quick"] * quick + ["--progress"] * progress
        rc = subprocess.run(cmd, env={**os.environ, **PINNED_ENV}, check=False).returncode
        answer = json.loads(result.read_text()) if result.is_file() else {}
    if "path" in answer:
        return Path(answer["path"])
    if answer.get("kind") == "input":
        from privrl.privacy.limits import InputError

        raise InputError(answer["error"])
    if rc < 0 or rc == 130:
        raise KeyboardInterrupt
    raise RuntimeError(
        f"building recipe {name} failed (exit {rc}): {answer.get('error', 'see the output above')}"
    )


def _main(argv: list[str] | None = None) -> int:
    """The child: ``python -m privrl.runs.recipes.numerics NAME DATA_DIR RESULT [...]``."""
    p = argparse.ArgumentParser(prog="python -m privrl.runs.recipes.numerics")
    p.add_argument("name")
    p.add_argument("data_dir", type=Path)
    p.add_argument("result", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--progress", action="store_true")
    a = p.parse_args(argv)
    from privrl.runs.recipes import RECIPES

    try:
        path = RECIPES[a.name].load()(a.data_dir, seed=a.seed, quick=a.quick, progress=a.progress)
    except ValueError as exc:  # InputError, DatasetError, RecipeBusyError: the user's to fix
        a.result.write_text(json.dumps({"error": str(exc), "kind": "input"}))
        return 1
    except Exception as exc:
        a.result.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        raise
    a.result.write_text(json.dumps({"path": str(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
