"""`plugins pin`'s text edit: one line changes, the rest is kept byte for byte, or it refuses."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from agent_runner.plugins.admission.pinning import PinRefused, check_edit, replace_file, set_pin

NEW = "sha256:" + "a" * 64
OLD = "sha256:" + "0" * 64
BASE = 'schema_version = 1\n[agent]\ncommand = ["true"]\nparser = "none"\n'


def pinned(text: str, name: str = "my_plugin") -> str:
    edited = set_pin(text, name, NEW)
    check_edit(text, edited, name, NEW, Path("agent-runner.toml"))
    assert tomllib.loads(edited)["plugins"]["pin"][name] == NEW
    return edited


def test_a_file_without_pins_gets_the_table_appended() -> None:
    assert pinned(BASE) == BASE + f'\n[plugins.pin]\nmy_plugin = "{NEW}"\n'


def test_a_file_without_a_final_newline_keeps_its_last_line() -> None:
    text = BASE + "# end"
    assert pinned(text) == text + f'\n\n[plugins.pin]\nmy_plugin = "{NEW}"\n'


def test_a_new_pin_goes_after_the_last_pin_of_the_table() -> None:
    text = (
        BASE
        + f'[plugins.pin]\n# reviewed\na = "{OLD}"  # note\n\n# about settings\n[plugins.settings.a]\nx = 1\n'
    )
    expected = (
        BASE
        + f'[plugins.pin]\n# reviewed\na = "{OLD}"  # note\nmy_plugin = "{NEW}"\n\n# about settings\n[plugins.settings.a]\nx = 1\n'
    )
    assert pinned(text) == expected


def test_an_empty_pin_table_gets_the_line_under_its_header() -> None:
    text = BASE + "[plugins.pin]   # none yet\n[runtime]\nmax_rounds = 1\n"
    assert (
        pinned(text)
        == BASE + f'[plugins.pin]   # none yet\nmy_plugin = "{NEW}"\n[runtime]\nmax_rounds = 1\n'
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f'my_plugin = "{OLD}"', f'my_plugin = "{NEW}"'),
        (f"  'my_plugin'='{OLD}'   # was", f"  'my_plugin'=\"{NEW}\"   # was"),
        (f'"my_plugin" = "{OLD}"#tight', f'"my_plugin" = "{NEW}"#tight'),
    ],
)
def test_an_existing_pin_is_replaced_on_its_line(line: str, expected: str) -> None:
    text = BASE + "[plugins.pin]\n" + line + "\n[vcs]\n"
    assert pinned(text) == BASE + "[plugins.pin]\n" + expected + "\n[vcs]\n"


def test_dotted_keys_outside_the_table_are_found() -> None:
    top = f'plugins.pin.my_plugin = "{OLD}"\n' + BASE
    assert pinned(top) == f'plugins.pin.my_plugin = "{NEW}"\n' + BASE
    text = BASE + f'[plugins]\npin."my_plugin" = "{OLD}"\n'
    assert pinned(text) == BASE + f'[plugins]\npin."my_plugin" = "{NEW}"\n'


def test_crlf_line_endings_are_kept() -> None:
    text = (BASE + f'[plugins.pin]\na = "{OLD}"\n').replace("\n", "\r\n")
    assert pinned(text) == text + f'my_plugin = "{NEW}"\r\n'


def test_a_name_that_needs_quotes_is_quoted() -> None:
    assert pinned(BASE, "my.plugin").endswith(f'[plugins.pin]\n"my.plugin" = "{NEW}"\n')


def test_a_header_inside_a_multiline_string_is_not_a_table() -> None:
    text = BASE + '[plugins.settings.a]\nnote = """\n[plugins.pin]\nmy_plugin = "x"\n"""\n'
    assert pinned(text) == text + f'\n[plugins.pin]\nmy_plugin = "{NEW}"\n'


def test_an_inline_pin_table_is_refused_with_the_line_to_add() -> None:
    text = BASE + f'[plugins]\npin = {{ a = "{OLD}" }}\n'
    edited = set_pin(text, "my_plugin", NEW)
    with pytest.raises(PinRefused, match=f'put `my_plugin = "{NEW}"` under \\[plugins.pin\\]'):
        check_edit(text, edited, "my_plugin", NEW, Path("agent-runner.toml"))


def test_a_pin_that_is_not_a_one_line_string_is_refused() -> None:
    text = BASE + '[plugins.pin]\nmy_plugin = """\nsha256:x"""\n'
    with pytest.raises(PinRefused, match="its value is not a one-line string"):
        set_pin(text, "my_plugin", NEW)


def test_an_edit_that_changes_anything_else_is_refused() -> None:
    text = BASE + "[vcs]\n"
    tampered = set_pin(text, "my_plugin", NEW).replace('parser = "none"', 'parser = "claude"')
    with pytest.raises(PinRefused, match="the file's layout is unusual"):
        check_edit(text, tampered, "my_plugin", NEW, Path("agent-runner.toml"))


def test_replace_file_keeps_the_mode_and_refuses_a_file_changed_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "agent-runner.toml"
    path.write_bytes(b"old\n")
    path.chmod(0o604)
    replace_file(path, b"old\n", b"new\n")
    assert path.read_bytes() == b"new\n"
    assert path.stat().st_mode & 0o777 == 0o604
    with pytest.raises(PinRefused, match="changed while the pin was being written"):
        replace_file(path, b"old\n", b"newer\n")
    assert path.read_bytes() == b"new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["agent-runner.toml"]
