"""Trust policy: refusals from RECORD alone, the digest's coverage and order, provenance."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest

from agent_runner.plugins.admission.discovery import (
    Candidate,
    Distribution,
    RecordEntry,
    discover,
    parse_record,
    search_path,
)
from agent_runner.plugins.admission.trust import (
    Unverified,
    canonical_name,
    compare_pin,
    digest_entries,
    format_digest,
    provenance,
    refusal,
    running_package,
    verify,
)

PACKAGE = running_package()
BUILTIN_VALUE = "agent_runner.plugins.builtin.dirty:PLUGIN"
BUILTIN_FILE = "agent_runner/plugins/builtin/dirty.py"


def dist(
    *paths: str, name: str = "my-plugin", site: Path = Path("/site"), **extra: object
) -> Distribution:
    record = tuple(RecordEntry(p, None, None, None) for p in paths)
    return Distribution(name, "1.0", site, "my_plugin-1.0.dist-info", record, **extra)  # type: ignore[arg-type]


def candidate(*paths: str, name: str = "my_plugin", value: str = "my_plugin:PLUGIN") -> Candidate:
    return Candidate(name, value, dist("my_plugin/__init__.py", *paths))


def test_a_plain_distribution_is_not_refused() -> None:
    assert (
        refusal(candidate("my_plugin/util.py", "my_plugin/__pycache__/util.cpython-311.pyc"))
        is None
    )


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("my_plugin.pth", "ships a .pth file (my_plugin.pth)"),
        ("deep/inside/x.pth", "ships a .pth file (deep/inside/x.pth)"),
        ("sitecustomize.py", "ships sitecustomize.py, which Python runs at every start"),
        ("usercustomize/__init__.py", "ships usercustomize/__init__.py"),
        (
            "my_plugin/sitecustomize.cpython-311-x86_64-linux-gnu.so",
            "which Python runs at every start",
        ),
        ("../../../bin/my-plugin", "escapes the site folder"),
        ("/etc/passwd", "escapes the site folder"),
        ("my_plugin/./x.py", "is not in canonical form"),
        ("my_plugin//x.py", "is not in canonical form"),
        ("my_plugin/a,b.py", "contains a control character, comma, quote or backslash"),
        ('my_plugin/a"b.py', "contains a control character, comma, quote or backslash"),
        ("my_plugin\\x.py", "contains a control character, comma, quote or backslash"),
        ("my_plugin/x\n.py", "contains a control character, comma, quote or backslash"),
        ("my_plugin/x\x00.py", "contains a control character, comma, quote or backslash"),
        ("my_plugin/__init__.py", "RECORD lists 'my_plugin/__init__.py' twice"),
        ("agent_runner/plugins/builtin/evil.py", "installs files into agent-runner's own package"),
    ],
)
def test_record_paths_that_refuse_the_plugin(path: str, reason: str) -> None:
    found = refusal(candidate(path))
    assert found is not None
    assert reason in found


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("other_module:PLUGIN", "module other_module is not a file of my-plugin"),
        ("my_plugin.sub:PLUGIN", "module my_plugin.sub is not a file of my-plugin"),
        ("ns.mod:PLUGIN", "ns/__init__.py is not a file of my-plugin (namespace packages"),
        (BUILTIN_VALUE, "module agent_runner.plugins.builtin.dirty is not a file of my-plugin"),
        ("my_plugin:PLUGIN [extra]", "is not module:attribute"),
        ("my_plugin:a.b", "is not module:attribute"),
        ("my-plugin:PLUGIN", "is not module:attribute"),
        ("", "is not module:attribute"),
    ],
)
def test_entry_values_that_refuse_the_plugin(value: str, reason: str) -> None:
    found = refusal(candidate("ns/mod.py", value=value))
    assert found is not None
    assert reason in found


def test_a_value_naming_only_a_module_is_accepted() -> None:
    # The child then takes the module's PLUGIN.
    assert refusal(candidate(value="my_plugin")) is None


@pytest.mark.parametrize("name", ["my plugin", "-dash", "a=b", "x\n", ""])
def test_names_that_refuse_the_plugin(name: str) -> None:
    found = refusal(candidate(name=name))
    assert found is not None
    assert "is not a valid plugin name" in found


def test_a_distribution_with_a_metadata_problem_is_refused_with_it() -> None:
    broken = Candidate(
        "x", "x:PLUGIN", dist(problem="x-1.dist-info/RECORD: line 2: expected path,hash,size")
    )
    assert refusal(broken) == "x-1.dist-info/RECORD: line 2: expected path,hash,size"


def test_the_digest_leaves_out_record_and_bytecode_and_sorts_bytewise() -> None:
    entries = digest_entries(
        dist(
            "my_plugin/b.py",
            "my_plugin-1.0.dist-info/RECORD",
            "my_plugin/__pycache__/b.cpython-311.pyc",
            "my_plugin/__pycache__/planted.txt",
            "my_plugin/old.pyc",
            "my_plugin/A.py",
            "my_plugin-1.0.dist-info/METADATA",
            "my_plugin/__pycache__.py",
            "other-1.0.dist-info/RECORD",
        )
    )
    assert [e.path for e in entries] == [
        "my_plugin-1.0.dist-info/METADATA",
        "my_plugin/A.py",
        "my_plugin/__pycache__.py",
        "my_plugin/b.py",
        "other-1.0.dist-info/RECORD",
    ]


def test_the_digest_is_sha256_of_sha256sum_lines() -> None:
    lines = ["a" * 64 + "  x/y.py\n"]
    assert format_digest(lines) == "sha256:" + hashlib.sha256(lines[0].encode()).hexdigest()


def write_dist(site: Path, files: dict[str, bytes], *, hashes: bool = True) -> Distribution:
    """A real installed distribution in `site`, with a RECORD listing `files`."""
    info = "my_plugin-1.0.dist-info"
    rows = []
    for path, data in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(data)}" if hashes else f"{path},,")
    (site / info).mkdir(exist_ok=True)
    (site / info / "entry_points.txt").write_text(
        "[agent_runner.plugins]\nmy_plugin = my_plugin:PLUGIN\n"
    )
    (site / info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 1.0\n")
    rows += [f"{info}/entry_points.txt,,", f"{info}/METADATA,,", f"{info}/RECORD,,"]
    (site / info / "RECORD").write_text("\n".join(rows) + "\n")
    (found,) = discover([site])
    return found.dist


def test_verify_keeps_the_modules_bytes_and_any_change_changes_the_digest(tmp_path: Path) -> None:
    files = {"my_plugin/__init__.py": b"PLUGIN = None\n", "my_plugin/data.txt": b"data\n"}
    first = verify(write_dist(tmp_path / "one", files))
    assert dict(first.sources) == {"my_plugin/__init__.py": b"PLUGIN = None\n"}
    same = verify(write_dist(tmp_path / "two", files))
    assert same.digest == first.digest
    changed = verify(write_dist(tmp_path / "three", {**files, "my_plugin/data.txt": b"data!\n"}))
    assert changed.digest != first.digest


def test_a_listed_file_without_a_hash_is_still_covered(tmp_path: Path) -> None:
    files = {"my_plugin/__init__.py": b"PLUGIN = None\n"}
    first = verify(write_dist(tmp_path / "one", files, hashes=False))
    second = verify(
        write_dist(tmp_path / "two", {"my_plugin/__init__.py": b"PLUGIN = 1\n"}, hashes=False)
    )
    assert first.digest != second.digest


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"a.py,sha256=x\n", "line 1: expected path,hash,size"),
        (b"a.py,,\nb.py,sha256,3\n", "line 2: hash is not algorithm=value"),
        (b"a.py,,big\n", "line 1: size is not a number"),
        (b"\xff,,\n", "not UTF-8"),
        (b",,\n", "line 1: expected path,hash,size"),
        (b"a" * 200_000 + b",,\n", "not CSV: field larger than field limit"),
    ],
)
def test_malformed_record_lines_are_named(text: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_record(text)


@pytest.mark.parametrize(
    ("algorithm", "problem"),
    [
        ("sha512", None),
        ("md5", "RECORD uses an unsupported hash 'md5'"),
        ("shake_128", "RECORD uses an unsupported hash 'shake_128'"),
        ("rot13", "RECORD uses an unsupported hash 'rot13'"),
    ],
)
def test_record_hash_algorithms(tmp_path: Path, algorithm: str, problem: str | None) -> None:
    found = write_dist(tmp_path, {"my_plugin/__init__.py": b"PLUGIN = None\n"})
    data = b"PLUGIN = None\n"
    hashed = hashlib.new(algorithm, data).digest() if algorithm in ("sha512", "md5") else b"x"
    value = base64.urlsafe_b64encode(hashed).rstrip(b"=").decode()
    entry = RecordEntry("my_plugin/__init__.py", algorithm, value, len(data))
    changed = Distribution(found.name, found.version, found.site, found.info_dir, (entry,))
    if problem is None:
        assert verify(changed).sources == {"my_plugin/__init__.py": data}
    else:
        with pytest.raises(Unverified, match=re.escape(problem)):
            verify(changed)


def test_record_paths_are_read_as_csv() -> None:
    (entry,) = parse_record(b'"a,b.py",sha256=abc,3\n')
    assert (entry.path, entry.algorithm, entry.digest, entry.size) == ("a,b.py", "sha256", "abc", 3)


def test_distribution_names_compare_like_installers() -> None:
    assert canonical_name("Agent_Runner") == canonical_name("agent.runner") == "agent-runner"


def test_compare_pin() -> None:
    assert compare_pin(None, "sha256:x") == ("unpinned", None)
    assert compare_pin("sha256:x", "sha256:x") == ("verified", None)
    assert compare_pin("sha256:y", "sha256:x")[0] == "mismatch"


def own(value: str = BUILTIN_VALUE, name: str = "builtin", **dist_fields: object) -> Candidate:
    fields: dict[str, object] = {"name": "agent-runner", "site": PACKAGE.parent, **dist_fields}
    return Candidate(name, value, dist(BUILTIN_FILE, **fields))  # type: ignore[arg-type]


def test_the_builtin_declared_by_the_running_installation_is_genuine() -> None:
    assert provenance(own(), PACKAGE) == "builtin"


@pytest.mark.parametrize(
    ("direct_url", "editable"),
    [
        ({"url": "file:///src/proj", "dir_info": {"editable": True}}, Path("/src/proj")),
        ({"url": "file:///src/proj", "dir_info": {}}, None),
        ({"url": "https://example.invalid/x", "dir_info": {"editable": True}}, None),
        ({"url": "file:///src/a%00b", "dir_info": {"editable": True}}, None),
        ({"url": "file://[bad/x", "dir_info": {"editable": True}}, None),
        ([], None),
    ],
)
def test_the_editable_folder_comes_only_from_a_plain_file_url(
    tmp_path: Path, direct_url: object, editable: Path | None
) -> None:
    found = write_dist(tmp_path, {"my_plugin/__init__.py": b""})
    (tmp_path / found.info_dir / "direct_url.json").write_text(json.dumps(direct_url))
    (again,) = discover([tmp_path])
    assert again.dist.editable_dir == editable


def test_an_editable_install_is_checked_against_its_source_folder() -> None:
    editable = own(editable_dir=PACKAGE.parent, site=Path("/elsewhere"))
    assert provenance(editable, PACKAGE) == "builtin"
    elsewhere = own(editable_dir=Path("/somewhere/else"))
    assert provenance(elsewhere, PACKAGE) == "squatter"


@pytest.mark.parametrize(
    "claim",
    [
        own(name="agent-runner-tools"),  # wrong name for the value
        own(value="evil:PLUGIN"),
        own(site=Path("/another/site")),  # another agent-runner installation, not the running one
        Candidate("builtin", BUILTIN_VALUE, dist(BUILTIN_FILE, name="agent-runner-extras")),
        Candidate("builtin", "squat:PLUGIN", dist("squat.py", name="squatter")),
        Candidate("helper", BUILTIN_VALUE, dist(BUILTIN_FILE, name="squatter")),
        Candidate("helper", "agent_runner:PLUGIN", dist("x.py", name="squatter")),
    ],
)
def test_anything_else_claiming_a_builtin_or_agent_runner_is_a_squatter(claim: Candidate) -> None:
    assert provenance(claim, PACKAGE) == "squatter"


def test_a_regular_install_must_list_the_builtin_in_its_record() -> None:
    unlisted = Candidate(
        "builtin",
        BUILTIN_VALUE,
        dist("agent_runner/__init__.py", name="agent-runner", site=PACKAGE.parent),
    )
    assert provenance(unlisted, PACKAGE) == "squatter"


def write_entry_points(site: Path, text: str) -> list[Candidate]:
    info = site / "my_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "entry_points.txt").write_text(text)
    (info / "METADATA").write_text("Name: my-plugin\nVersion: 1.0\n")
    (info / "RECORD").write_text("")
    return discover([site])


def test_entry_points_are_read_like_importlib_metadata(tmp_path: Path) -> None:
    text = (
        "[console_scripts]\nx = y:z\n[DEFAULT]\nleaked = a:b\n"
        "[agent_runner.plugins]\n  # a comment\n  one = pkg.one:PLUGIN  \ntwo=pkg.two\n"
    )
    found = write_entry_points(tmp_path, text)
    assert [(c.name, c.value, c.dist.name) for c in found] == [
        ("one", "pkg.one:PLUGIN", "my-plugin"),
        ("two", "pkg.two", "my-plugin"),
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[agent_runner.plugins]\nno equals sign\n", "line 2: expected name = value"),
        ("[agent_runner.plugins]\na = x:P\na = y:P\n", "declares 'a' twice"),
        ("[agent_runner.plugins]\n" + "n" * 201 + " = x:P\n", "longer than 200 characters"),
    ],
)
def test_a_malformed_entry_points_file_is_reported_under_its_folder(
    tmp_path: Path, text: str, problem: str
) -> None:
    (found,) = write_entry_points(tmp_path, text)
    assert found.name == "my_plugin-1.0.dist-info"
    assert found.dist.problem is not None
    assert problem in found.dist.problem


def test_metadata_that_a_terminal_would_interpret_is_made_printable(tmp_path: Path) -> None:
    info = tmp_path / "x-1.dist-info"
    info.mkdir()
    (info / "entry_points.txt").write_text("[agent_runner.plugins]\nx\x1b[2J = x:PLUGIN\n")
    (info / "METADATA").write_text("Name: evil\x1b]0;title\x07\nVersion: 1\n")
    (info / "RECORD").write_text("")
    (found,) = discover([tmp_path])
    assert (found.name, found.dist.name) == ("x?[2J", "evil?]0;title?")


def test_a_symlinked_metadata_folder_is_reported_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere" / "x-1.dist-info"
    real.mkdir(parents=True)
    (real / "entry_points.txt").write_text("[agent_runner.plugins]\nx = x:PLUGIN\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "x-1.dist-info").symlink_to(real)
    (found,) = discover([site])
    assert found.dist.problem == "x-1.dist-info: is a symlink"


def test_search_path_leaves_out_cwd_work_dir_and_duplicates(tmp_path: Path) -> None:
    folders = [tmp_path / name for name in ("a", "b", "work", "work/inner")]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    (tmp_path / "link").symlink_to(tmp_path / "a")
    entries = [
        "",
        ".",
        str(tmp_path / "a"),
        str(tmp_path / "link"),
        "b",
        str(tmp_path / "work/inner"),
        "/nonexistent",
    ]
    found = search_path(entries, cwd=tmp_path, work_dir=tmp_path / "work")
    assert found == [tmp_path / "a", tmp_path / "b"]
