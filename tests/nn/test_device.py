"""Device names: one spelling for every torch path; an absent GPU is refused, never ignored."""

from __future__ import annotations

import pytest
import torch

from privrl.nn.device import check_device, describe_device, resolve_device

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")


@pytest.mark.parametrize("name", ["cpu", "CPU", "auto", "cuda", "cuda:0", "cuda:12", " cpu "])
def test_spellings_accepted(name: str) -> None:
    assert check_device(name) is None


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "mps:0", "", "cpu:0"])
def test_spellings_refused(name: str) -> None:
    problem = check_device(name)
    assert problem is not None and "cpu, cuda, cuda:N or auto" in problem
    with pytest.raises(ValueError, match="device must be one of"):
        resolve_device(name)


def test_cpu_and_auto() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device(None).type == expected
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert describe_device(torch.device("cpu")) == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_absent_gpu_refused() -> None:
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        resolve_device("cuda:1")


@CUDA
def test_absent_index_refused() -> None:
    n = torch.cuda.device_count()
    with pytest.raises(ValueError, match="is not present"):
        resolve_device(f"cuda:{n}")
    assert describe_device(resolve_device("cuda:0")).startswith("cuda:0 (")
