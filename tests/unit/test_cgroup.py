"""Finding the cgroup v2 hierarchy and our place in it, from /proc text (both host layouts)."""

from __future__ import annotations

from pathlib import Path

from agent_runner.supervisor.agent.cgroup import cgroup2_mount, cgroup_dir, own_cgroup

HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
UNIFIED_MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
"""
HYBRID_CGROUP = "9:name=systemd:/\n4:memory:/process_api/22cc\n1:cpu:/\n0::/\n"
SERVICE_CGROUP = "0::/system.slice/agent-runner@home-me-proj.service\n"


def test_the_hybrid_layout_finds_the_unified_mount_and_the_root_cgroup() -> None:
    assert cgroup2_mount(HYBRID_MOUNTINFO) == (Path("/sys/fs/cgroup/unified"), "/")
    assert own_cgroup(HYBRID_CGROUP) == "/"
    assert cgroup_dir(Path("/sys/fs/cgroup/unified"), "/", "/") == Path("/sys/fs/cgroup/unified")


def test_a_systemd_service_finds_its_own_delegated_cgroup() -> None:
    mount, root = cgroup2_mount(UNIFIED_MOUNTINFO) or (None, None)
    assert (mount, root) == (Path("/sys/fs/cgroup"), "/")
    own = own_cgroup(SERVICE_CGROUP)
    assert own == "/system.slice/agent-runner@home-me-proj.service"
    assert cgroup_dir(mount, root, own) == Path(
        "/sys/fs/cgroup/system.slice/agent-runner@home-me-proj.service"
    )


def test_a_mount_showing_only_a_subtree_maps_paths_below_it_and_nothing_else() -> None:
    mount = Path("/sys/fs/cgroup")
    assert (
        cgroup_dir(mount, "/user.slice", "/user.slice/user-1000.slice") == mount / "user-1000.slice"
    )
    assert cgroup_dir(mount, "/user.slice", "/system.slice/x.service") is None


def test_no_cgroup2_mount_and_no_v2_line_are_reported_as_none() -> None:
    only_v1 = "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    assert cgroup2_mount(only_v1) is None
    assert own_cgroup("4:memory:/x\n1:cpu:/\n") is None


def test_escaped_characters_in_a_mount_point_are_decoded() -> None:
    text = "41 31 0:38 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n"
    assert cgroup2_mount(text) == (Path("/mnt/cg two"), "/")
