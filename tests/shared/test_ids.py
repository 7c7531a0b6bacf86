"""The one rule for identifiers, owner ids, request ids and time zones (shared/ids.py)."""

from __future__ import annotations

import pytest

from shared import ids
from shared.errors import InvalidArgument


@pytest.mark.parametrize(
    "value",
    ["t-1", "automation:0f3c", "x" * 128, "run_01.ABC~!", "a@b|c"],
)
def test_ids_of_printable_ascii_up_to_128_characters_are_accepted(value: str) -> None:
    assert ids.is_identifier(value)
    assert ids.id_problem(value) is None
    assert ids.check_identifier(value, "run_id") == value


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "must not be empty"),
        ("x" * 129, "must be at most 128 characters"),
        ("a b", ids.ID_RULE),
        ("alice\n", ids.ID_RULE),  # a trailing newline is not let through
        ("a/b", ids.ID_RULE),
        ("a\\b", ids.ID_RULE),
        ("a\x00b", ids.ID_RULE),
        ("a\x7fb", ids.ID_RULE),
        ("线程", ids.ID_RULE),
        ("a\ud800b", ids.ID_RULE),
    ],
)
def test_other_ids_are_refused_naming_the_field(value: str, problem: str) -> None:
    assert ids.id_problem(value) == problem
    with pytest.raises(InvalidArgument) as caught:
        ids.check_identifier(value, "messages[0].id")
    assert caught.value.violations == (("messages[0].id", problem),)


def test_an_unset_optional_id_is_empty_and_a_set_one_is_checked() -> None:
    assert ids.optional_identifier("", "run_id") == ""
    with pytest.raises(InvalidArgument):
        ids.optional_identifier("a b", "run_id")


@pytest.mark.parametrize(
    "value", ["alice", "auth0|5f7c", "user@example.com", "a:b.c_d-e", "x" * 128]
)
def test_owner_ids_of_identity_providers_are_accepted(value: str) -> None:
    assert ids.is_owner_id(value)


@pytest.mark.parametrize("value", ["", "alice\n", "alice/x", "a b", "x" * 129, "ålice", "a\x00"])
def test_owner_ids_outside_the_rule_are_refused(value: str) -> None:
    assert not ids.is_owner_id(value)


@pytest.mark.parametrize(
    ("value", "ok"),
    [("req-1.a:b_c", True), ("", False), ("a\n", False), ("a b", False), ("x" * 129, False)],
)
def test_request_ids_are_short_and_plain(value: str, ok: bool) -> None:
    assert ids.is_request_id(value) is ok


@pytest.mark.parametrize(
    "name", ["Asia/Shanghai", "Europe/London", "UTC", "America/Argentina/Buenos_Aires"]
)
def test_iana_zone_names_are_zones(name: str) -> None:
    assert ids.is_time_zone(name)
    zone = ids.check_time_zone(name, "timezone")
    assert zone.key == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "Europe",
        "America",
        "America/Argentina",
        "x" * 300,
        "/etc/localtime",
        "../etc/passwd",
        "Europe/London\n",
        "Mars/Olympus",
        "Europe/Lon\x00don",
    ],
)
def test_folders_paths_and_long_strings_are_not_zones(name: str) -> None:
    assert ids.time_zone(name) is None
    with pytest.raises(InvalidArgument) as caught:
        ids.check_time_zone(name, "timezone")
    assert caught.value.violations[0][0] == "timezone"
    # The description quotes a bounded prefix of the name, not all of it.
    assert len(caught.value.message) < 200
