"""The Python API's shared shape (`privrl.algorithm`): a header from a dataset in memory, and a
library call as a ledger transaction (reserve before the data is read, complete after, fail
closed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from privrl.algorithm import Algorithm, Fitted, Plan, header_and_plan, spending
from privrl.config import Config, ConfigError, check, option
from privrl.data.io import header_of, load_hdf5, read_header, save_hdf5
from privrl.privacy.ledger import LedgerError
from tests.privacy.test_ledger import gaussian_report, make_dataset, new_ledger


@dataclass(frozen=True)
class ToyConfig(Config):
    """A config with one knob."""

    z: float = option(2.0, help="Noise multiplier.")

    def validate(self) -> None:
        check(self.z > 0, "z", f"must be > 0, got {self.z}")


class Toy(Algorithm[ToyConfig]):
    Config = ToyConfig

    def __init__(self, config: ToyConfig | None = None, **settings: object) -> None:
        super().__init__(config, **settings)
        self.read = 0

    def plan(self, header) -> Plan:
        return Plan(gaussian_report(self.config.z), public={"n": header.n_episodes})

    def fit(self, dataset, *, ledger=None, fail: bool = False) -> Fitted[None]:
        header, plan = header_and_plan(self, dataset)

        def compute() -> Fitted[None]:
            self.read += 1  # stands for the first read of the episodes
            if fail:
                raise RuntimeError("boom")
            return Fitted(None, gaussian_report(self.config.z))

        return spending(ledger, plan, header, compute, label="toy")


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    return save_hdf5(make_dataset(), tmp_path / "d.h5")


def test_header_of_matches_the_files_header(stored: Path) -> None:
    ds = load_hdf5(stored)
    mine, theirs = header_of(ds), read_header(stored)
    assert mine.path is None
    assert (mine.n_episodes, mine.n_transitions) == (theirs.n_episodes, theirs.n_transitions)
    assert mine.content_sha256 == theirs.content_sha256
    assert mine.metadata.equals(theirs.metadata)


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        Toy(z=-1.0)
    assert err.value.key == "z" and "--" not in str(err.value)
    assert Toy(ToyConfig(z=3.0), z=4.0).config.z == 4.0
    with pytest.raises(TypeError, match="takes a ToyConfig"):
        Toy(object())  # type: ignore[arg-type]


def test_fit_with_a_ledger_reserves_then_completes(stored: Path) -> None:
    ledger = new_ledger(stored, epsilon=10.0)
    toy = Toy(z=2.0)
    toy.fit(load_hdf5(stored), ledger=ledger)
    (entry,) = ledger.entries
    assert entry.status == "complete" and entry.label == "toy"
    assert ledger.spent() == pytest.approx(gaussian_report(2.0).epsilon)


def test_a_failed_fit_keeps_its_reservation_counting(stored: Path) -> None:
    ledger = new_ledger(stored, epsilon=10.0)
    with pytest.raises(RuntimeError, match="boom"):
        Toy(z=2.0).fit(load_hdf5(stored), ledger=ledger, fail=True)
    (entry,) = ledger.entries
    assert entry.status == "reserved"
    assert ledger.spent() == pytest.approx(gaussian_report(2.0).epsilon)


def test_an_overspend_is_refused_before_the_data_is_read(stored: Path) -> None:
    ledger = new_ledger(stored, epsilon=0.01)
    toy = Toy(z=1.0)
    with pytest.raises(LedgerError):
        toy.fit(load_hdf5(stored), ledger=ledger)
    assert toy.read == 0 and ledger.entries == ()


def test_a_ledger_of_other_episodes_is_refused(stored: Path, tmp_path: Path) -> None:
    other = save_hdf5(make_dataset(seed=1), tmp_path / "other.h5")
    ledger = new_ledger(other, epsilon=10.0)
    toy = Toy()
    with pytest.raises(LedgerError, match="belongs to other episodes"):
        toy.fit(load_hdf5(stored), ledger=ledger)
    assert toy.read == 0 and ledger.entries == ()
