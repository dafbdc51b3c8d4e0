"""Instance names match systemd's own escaping both ways; text that could inject unit syntax is refused."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_runner.errors import SystemdError
from agent_runner.systemd.names import (
    UNIT_NAME_MAX,
    check_project_dir,
    check_unit_text,
    escape_path,
    unescape_path,
    unit_name,
)

PATHS = [
    "/home/me/proj",
    "/",
    "/work/main//a/",
    "/a/./b",
    "/home/me/my proj/.x-y",
    "/srv/ünï/日本",
    "/a/.hidden",
    "/.dot/first",
    "/a-b/c--d/-e-",
    "/v1.2/x..y/trailing.",
    "/tab\there",
    "/a:b_c/%x",
]


def systemd_escape(*args: str) -> str:
    if shutil.which("systemd-escape") is None:
        pytest.fail("systemd-escape is part of systemd (Debian package `systemd`); install it")
    done = subprocess.run(["systemd-escape", *args], capture_output=True, text=True, check=True)
    return done.stdout.rstrip("\n")


@pytest.mark.parametrize("path", PATHS)
def test_escape_matches_systemd_escape(path: str) -> None:
    assert escape_path(path) == systemd_escape("--path", "--", path)


@pytest.mark.parametrize("path", PATHS)
def test_unescape_matches_systemd_and_gives_the_normalized_path_back(path: str) -> None:
    name = escape_path(path)
    assert unescape_path(name) == systemd_escape("--unescape", "--path", "--", name)
    assert unescape_path(name) == os.path.normpath(path).replace("//", "/")


@given(
    st.lists(
        st.text(
            st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"), min_size=1
        ).filter(lambda part: part not in (".", "..")),
        max_size=6,
    )
)
def test_any_absolute_path_round_trips(parts: list[str]) -> None:
    path = "/" + "/".join(parts)
    assert unescape_path(escape_path(path)) == path


@pytest.mark.parametrize("path", ["relative/dir", "/a/../b", ""])
def test_paths_systemd_cannot_escape_reversibly_are_refused(path: str) -> None:
    with pytest.raises(SystemdError, match=r"not an absolute path|not a normalized path"):
        escape_path(path)


@pytest.mark.parametrize("name", ["a--b", "a-", "bad\\x4", "bad\\q41"])
def test_malformed_instance_names_do_not_unescape(name: str) -> None:
    with pytest.raises(SystemdError, match=r"bad escape|not an escaped path"):
        unescape_path(name)


def test_unit_name_is_a_template_instance() -> None:
    assert unit_name("/home/me/my-proj") == "agent-runner@home-me-my\\x2dproj.service"


def test_a_unit_name_systemd_could_not_load_is_refused() -> None:
    longest = "/" + "a" * (UNIT_NAME_MAX - len("agent-runner@.service"))
    assert len(unit_name(longest)) == UNIT_NAME_MAX
    with pytest.raises(SystemdError, match=r"would be 256 characters; systemd allows 255"):
        unit_name(longest + "a")


@pytest.mark.parametrize(
    ("path", "char"),
    [
        ("/home/me/pro\nj", "\n"),
        ("/home/me/a\rb", "\r"),
        ("/home/me/100%", "%"),
        ('/home/me/"q"', '"'),
        ("/home/me/it's", "'"),
        ("/home/me/back\\slash", "\\"),
        ("/home/me/$HOME", "$"),
        ("/home/me/esc\x1b[0m", "\x1b"),
        ("/home/me/del\x7f", "\x7f"),
        ("/home/me/bad-\udcff-byte", "\udcff"),
    ],
)
def test_project_folders_that_could_inject_unit_syntax_are_refused(path: str, char: str) -> None:
    with pytest.raises(
        SystemdError, match=r"^project folder .* contains .*rename or move it$"
    ) as exc:
        check_project_dir(path)
    assert repr(char) in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("path", ["/home/me/my proj", "/srv/ünï", "/a/b-c.d", "/x:y_z"])
def test_ordinary_project_folders_are_accepted(path: str) -> None:
    assert check_project_dir(path) == path


def test_unnormalized_project_folders_are_refused() -> None:
    with pytest.raises(SystemdError, match="not an absolute, normalized path"):
        check_project_dir("/home/me/./proj")


def test_other_unit_values_name_what_they_are() -> None:
    with pytest.raises(SystemdError, match=r"^PATH '/bin:%h' contains '%'"):
        check_unit_text("/bin:%h", "PATH")
