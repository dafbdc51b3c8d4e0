"""Which variables a plugin child inherits: names one by one, locale values shaped like locales."""

from __future__ import annotations

import pytest

from agent_runner.plugins.childenv import allowed_environment


def test_only_path_tz_and_the_posix_locale_categories_pass() -> None:
    environ = {
        "PATH": "/usr/bin",
        "TZ": "Europe/Berlin",
        "LANG": "en_US.UTF-8",
        "LC_TIME": "de_DE.UTF-8",
        "LC_GITHUB_TOKEN": "en_US",
        "LC_PAPER": "en_US.UTF-8",
        "ANTHROPIC_API_KEY": "sk-ant",
        "HOME": "/home/u",
    }
    assert allowed_environment(environ) == {
        "PATH": "/usr/bin",
        "TZ": "Europe/Berlin",
        "LANG": "en_US.UTF-8",
        "LC_TIME": "de_DE.UTF-8",
    }


@pytest.mark.parametrize(
    "value",
    [
        "C",
        "POSIX",
        "C.UTF-8",
        "C.utf8",
        "en_US.UTF-8",
        "de_DE@euro",
        "sr_RS@latin",
        "es_419.UTF-8",
        "fr",
    ],
)
def test_locale_names_pass(value: str) -> None:
    assert allowed_environment({"LC_ALL": value}) == {"LC_ALL": value}


@pytest.mark.parametrize(
    "value",
    [
        "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
        "sk-ant-api03-abcdef",
        "en_US.UTF-8 extra",
        "en_US.UTF-8\n",
        "$(curl evil)",
        "../../etc/passwd",
        "",
        "EN_us",
    ],
)
def test_values_that_are_not_locale_names_are_dropped(value: str) -> None:
    assert allowed_environment({"LANG": value, "LC_CTYPE": value}) == {}
