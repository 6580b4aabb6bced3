"""The container's view of the energy counters, laid out as deploy/ mounts it.

/sys/class/powercap entries are relative links into /sys/devices. Mounting the
class directory alone leaves links to nowhere; mounting /sys/devices beside it
at the same relative place (as deploy/daemonset.yaml and the Dockerfile do)
lets them resolve.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from jouled.meter.rapl import discover

REPO = Path(__file__).resolve().parents[2]
ZONE = "devices/virtual/powercap/intel-rapl/intel-rapl:0"


def host_sys(root: Path) -> Path:
    """A /sys shaped like the kernel's: the class entry links into devices."""
    zone = root / "sys" / ZONE
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "energy_uj").write_text("123456\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    cls = root / "sys" / "class" / "powercap"
    cls.mkdir(parents=True)
    (cls / "intel-rapl:0").symlink_to(Path("../..") / ZONE)
    return root / "sys"


def test_the_class_directory_alone_reads_no_zones(tmp_path: Path) -> None:
    sys_ = host_sys(tmp_path / "host")
    mounted = tmp_path / "container" / "host" / "powercap"
    shutil.copytree(sys_ / "class" / "powercap", mounted, symlinks=True)  # a bind of the class dir
    assert discover(mounted) == []


def test_class_and_devices_mounted_side_by_side_resolve(tmp_path: Path) -> None:
    sys_ = host_sys(tmp_path / "host")
    target = tmp_path / "container" / "host" / "sys"
    shutil.copytree(sys_ / "class" / "powercap", target / "class" / "powercap", symlinks=True)
    shutil.copytree(sys_ / "devices", target / "devices", symlinks=True)
    zones = discover(target / "class" / "powercap")
    assert [z.name for z in zones] == ["package-0"]


def test_the_deploy_files_mount_both_at_the_same_relative_places() -> None:
    daemonset = (REPO / "deploy" / "daemonset.yaml").read_text()
    for mount in ("mountPath: /host/sys/class/powercap", "mountPath: /host/sys/devices"):
        assert mount in daemonset
    assert "value: /host/sys/class/powercap" in daemonset
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    assert "/sys/devices:/host/sys/devices:ro" in dockerfile
