"""`privrl.runs.wording`: the command line writes the library's `field` references as flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from privrl.config import Config, ConfigError, option
from privrl.runs.wording import command_words, in_command_words


@dataclass(frozen=True)
class _Toy(Config):
    system: ClassVar[str] = "toy"
    max_len: int | None = option(None, help="L.")
    canaries: int = option(4, "--canaries", "-m", help="m.")
    non_private: bool = option(False, "--non-private/", help="twin.")


def test_fields_become_flags_and_other_names_stay() -> None:
    text = "pass `max_len=L`, set `canaries=3` or `non_private`; `unknown` and `canaries` x"
    assert command_words(text, _Toy) == (
        "pass --max-len L, set --canaries 3 or --non-private; `unknown` and --canaries x"
    )
    assert command_words("no `non_private=True`", _Toy) == "no --non-private"
    assert command_words("whole", _Toy, {"whole": "the command's own"}) == "the command's own"


def test_errors_are_reraised_in_command_words_keeping_their_type_and_field() -> None:
    with pytest.raises(ConfigError) as info, in_command_words(_Toy):
        raise ConfigError("canaries", "is 4, the file holds 3: set `canaries=3`")
    assert info.value.key == "canaries"
    assert (
        info.value.message_for("--canaries")
        == "--canaries is 4, the file holds 3: set --canaries 3"
    )

    class Odd(ValueError):
        pass

    with pytest.raises(Odd, match=r"^give --max-len L$"), in_command_words(_Toy):
        raise Odd("give `max_len=L`")
    with pytest.raises(KeyError), in_command_words(_Toy):  # not a ValueError: untouched
        raise KeyError("`max_len`")


def test_phrases_are_replaced_first_and_unknown_names_stay() -> None:
    """The OPE commands' phrases (an argument of the Python API written as the command's own
    flag) go first; a name that is not a field of the config keeps its backquotes."""
    phrases = (("a public dataset (`public=`)", "--public-data FILE"),)
    text = "set `max_len=L` or give a public dataset (`public=`); `public` alone stays"
    assert command_words(text, _Toy, phrases=phrases) == (
        "set --max-len L or give --public-data FILE; `public` alone stays"
    )


def test_a_value_error_keeps_its_type_and_attributes() -> None:
    """Rewritten in place: a `DatasetError` keeps its located field, and its full `detail`
    is worded as the message is."""
    from privrl.data.dataset import DatasetError

    with pytest.raises(DatasetError) as info, in_command_words(_Toy):
        raise DatasetError("schema: pass `max_len=L`", field="obs")
    assert str(info.value) == "schema: pass --max-len L" and info.value.field == "obs"
    assert info.value.detail == "schema: pass --max-len L"


def test_details_listing_fields_name_their_flags() -> None:
    from privrl.privacy.public import PublicParameters, Source
    from privrl.runs.wording import command_detail, command_parameters

    assert command_detail("max_len, canaries; from the flags", _Toy) == (
        "--max-len, --canaries; from the flags"
    )
    assert command_detail("canaries, other", _Toy) == "canaries, other"  # not all fields
    params = PublicParameters()
    params.given("m", 4, Source.FLAG, "canaries")
    assert [p.detail for p in command_parameters(params, _Toy)] == ["--canaries"]


def test_parameters_become_flags_by_a_mapping_then_bare_phrases() -> None:
    """`mapped_words`: a command built on a function's parameters (not a config) writes them
    as flags from a mapping; names outside it keep their backquotes; bare phrases go after."""
    from privrl.runs.wording import mapped_words

    flags = {"unit": "--unit", "keep_columns": "--keep-columns", "bandit": "--bandit"}
    text = "use `unit=column=NAME` or `bandit=True`; `keep_columns` and `other` x"
    assert mapped_words(text, flags) == (
        "use --unit column=NAME or --bandit; --keep-columns and `other` x"
    )
    phrases = (("keep_columns", "--keep-columns"),)
    assert mapped_words("keep_columns: 'a' twice; `keep_columns`", flags, bare=phrases) == (
        "--keep-columns: 'a' twice; --keep-columns"
    )


def test_in_mapped_words_rewrites_a_value_error_in_place() -> None:
    from privrl.data.dataset import DatasetError
    from privrl.privacy.limits import InputError
    from privrl.runs.wording import in_data_words, in_mapped_words

    with (
        pytest.raises(InputError, match=r"^--out x is a directory$"),
        in_mapped_words({"out": "--out"}),
    ):
        raise InputError("`out` x is a directory")
    with pytest.raises(DatasetError) as info, in_data_words():
        raise DatasetError("t.csv: pass clip_out_of_space=True to clip", field="obs")
    assert str(info.value) == "t.csv: pass --clip-out-of-space to clip"
    assert info.value.detail == str(info.value) and info.value.field == "obs"
    with pytest.raises(KeyError), in_data_words():  # not a ValueError: untouched
        raise KeyError("`out`")
