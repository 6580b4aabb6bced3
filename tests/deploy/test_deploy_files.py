"""The deploy files say what the daemon does: every command line in them starts it.

Each deploy recipe (the systemd unit, the Dockerfile and its documented `docker
run` lines, the DaemonSet) is read the way its runtime reads it, and its
`jouled serve` command line is parsed by the real CLI and validated by the real
Config. A recipe whose minimum isolation is `bwrap` must grant what bwrap needs
there, or the daemon refuses to start; the cgroup limits need a delegated,
writable subtree; the image must never resolve to a public registry; and the
socket the README's fleet example names is the one the recipes listen on.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import typer

from jouled.auth import PeerRule
from jouled.cli import app
from jouled.config import Config
from tests.deploy import yamlish

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
UNIT = DEPLOY / "jouled.service"
DOCKERFILE = DEPLOY / "Dockerfile"
DAEMONSET = DEPLOY / "daemonset.yaml"

# CLI option -> Config field, where the names differ.
_RENAMED = {
    "tasks": "task_dirs",
    "tokens": "tokens_file",
    "heartbeat": "heartbeat_s",
    "grace": "grace_s",
    "solvers": "solvers_file",
    "metrics_solver": "metrics_solvers",
    "peer_role": "peer_rules",
}


def serve_config(argv: Sequence[str], env: Mapping[str, str]) -> Config:
    """`argv` (after `jouled serve`) parsed by the real CLI, validated by the real Config."""
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    params = serve.make_context("serve", list(argv)).params
    fields: dict[str, Any] = {}
    for name, value in params.items():
        if value in (None, (), []) or name in ("verbose", "data_dir"):
            continue  # the CLI's "not given"

        if name == "peer_role":
            value = tuple(PeerRule.parse(r) for r in value)
        elif name == "gpus":
            value = tuple(g.strip() for g in value.split(",") if g.strip())
        elif isinstance(value, list):
            value = tuple(value)
        fields[_RENAMED.get(name, name)] = value
    return Config.from_env(env=env, data_dir=params.get("data_dir"), **fields)


# -- the systemd unit -----------------------------------------------------------------------


def unit_service() -> dict[str, str]:
    """[Service] KEY=VALUE lines of the unit, continuation lines joined."""
    section, out, pending = "", {}, ""
    for raw in UNIT.read_text().splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            assert key not in out, f"{key} set twice in the unit"
            out[key] = value.strip()
    return out


def unit_serve_argv() -> list[str]:
    argv = shlex.split(unit_service()["ExecStart"])
    assert Path(argv[0]).name == "jouled" and argv[1] == "serve", argv
    return argv[2:]


def listen_unix(argv: Sequence[str]) -> list[str]:
    """The unix: socket paths a serve argv listens on (`--listen X` or `--listen=X`)."""
    found, args = [], list(argv)
    for i, arg in enumerate(args):
        if arg == "--listen":
            value = args[i + 1]
        else:
            value = arg.partition("=")[2] if arg.startswith("--listen=") else ""
        if value.startswith("unix:"):
            found.append(value[len("unix:") :])
    return found


_READ_ONLY_CGROUPS = {"true", "yes", "on", "1", "strict"}


def test_the_unit_delegates_a_writable_cgroup_subtree() -> None:
    service = unit_service()
    delegate = service.get("Delegate", "no")
    assert delegate == "yes" or {"memory", "pids"} <= set(delegate.split()), (
        f"Delegate={delegate}: the sandbox's per-run cgroups need the memory and pids "
        "controllers delegated"
    )
    protect = service.get("ProtectControlGroups", "false")
    assert protect not in _READ_ONLY_CGROUPS, (
        f"ProtectControlGroups={protect} makes /sys/fs/cgroup read-only to the service, "
        "so it cannot create its per-run cgroups in the delegated subtree"
    )


def test_the_unit_keeps_its_other_hardening() -> None:
    service = unit_service()
    for key, value in {
        "User": "jouled",
        "ProtectSystem": "strict",
        "NoNewPrivileges": "true",
        "ProtectHome": "read-only",
        "PrivateTmp": "true",
        "ProtectKernelModules": "true",
        "RestrictSUIDSGID": "true",
        "LockPersonality": "true",
        "UMask": "0077",
    }.items():
        assert service.get(key) == value, f"{key}={service.get(key)}, expected {value}"


def test_the_units_command_line_starts_serve() -> None:
    env = dict(e.split("=", 1) for e in unit_service()["Environment"].split())
    config = serve_config(unit_serve_argv(), env)
    assert config.min_isolation == "bwrap"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    # verify checks that ExecStart's binary exists; point it at this checkout's jouled.
    jouled = Path(sys.executable).with_name("jouled")
    assert jouled.exists(), jouled
    text = UNIT.read_text().replace("/opt/joule-bench/.venv/bin/jouled", str(jouled))
    copy = tmp_path / "jouled.service"
    copy.write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    # systemd ignores what it cannot parse with a warning, not a failure.
    assert not re.search(r"ignoring|unknown", output, re.I), output


# -- the Dockerfile -------------------------------------------------------------------------


def dockerfile() -> tuple[dict[str, list[str]], list[str]]:
    """Instructions (name -> arguments of the last one) and the comment lines."""
    instructions: dict[str, list[str]] = {}
    comments, pending = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        if raw.startswith("#"):
            comments.append(raw[1:])
            continue
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line:
            name, _, rest = line.partition(" ")
            instructions[name.upper()] = [rest.strip()]
    return instructions, comments


def docker_env() -> dict[str, str]:
    (env,) = dockerfile()[0]["ENV"]
    return dict(pair.split("=", 1) for pair in shlex.split(env))


def docker_argv(name: str) -> list[str]:
    raw = dockerfile()[0].get(name)
    if raw is None:
        return []
    value = json.loads(raw[0])  # the exec form: the shell form would run under sh -c
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), raw
    return value


def documented_runs() -> list[list[str]]:
    """Every `docker run` / `docker build` command in the Dockerfile's comments."""
    runs, current = [], ""
    for line in dockerfile()[1]:
        text = line.strip()
        if text.startswith("docker "):
            current = text
        elif current:
            current += " " + text
        else:
            continue
        if current.endswith("\\"):
            current = current[:-1]
            continue
        runs.append(shlex.split(current))
        current = ""
    return runs


def run_image_and_args(run: list[str]) -> tuple[dict[str, list[str]], str, list[str]]:
    """A `docker run` argv: its options, its image and the arguments after the image."""
    options: dict[str, list[str]] = {}
    flags_without_value = {"--rm", "-d", "--detach", "-it", "-i", "-t", "--init"}
    i = 2
    while i < len(run) and run[i].startswith("-"):
        if run[i] in flags_without_value or "=" in run[i]:
            key, _, value = run[i].partition("=")
            options.setdefault(key, []).append(value)
            i += 1
        else:
            options.setdefault(run[i], []).append(run[i + 1])
            i += 2
    return options, run[i], run[i + 1 :]


# What bwrap needs in a container whose daemon runs as root (Docker's default
# seccomp profile refuses pivot_root; docker-default AppArmor denies mount).
BWRAP_IN_DOCKER = {
    ("--cap-add", "SYS_ADMIN"),
    ("--security-opt", "seccomp=unconfined"),
    ("--security-opt", "apparmor=unconfined"),
}


def test_the_images_default_command_is_a_valid_serve() -> None:
    argv = docker_argv("ENTRYPOINT") + docker_argv("CMD")
    assert argv[:2] == ["jouled", "serve"], argv
    serve_config(argv[2:], docker_env())


def test_every_documented_docker_run_starts_the_daemon() -> None:
    entry = docker_argv("ENTRYPOINT")
    runs = [r for r in documented_runs() if r[:2] == ["docker", "run"]]
    assert runs, "the Dockerfile documents no docker run line"
    (build,) = [r for r in documented_runs() if r[:2] == ["docker", "build"]]
    tag = build[build.index("-t") + 1]
    for run in runs:
        options, image, extra = run_image_and_args(run)
        assert image == tag, f"{image} is not the image the build line makes ({tag})"
        config = serve_config(entry[2:] + docker_argv("CMD") + extra, docker_env())
        if config.min_isolation == "bwrap":
            given = {(key, value) for key, values in options.items() for value in values}
            missing = BWRAP_IN_DOCKER - given
            assert not missing, (
                f"{shlex.join(run)}\nwould be refused at the bwrap level: it lacks "
                f"{sorted(missing)}"
            )


# -- the DaemonSet --------------------------------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_VOLUME_SOURCES = {"hostPath", "secret", "configMap", "emptyDir", "persistentVolumeClaim"}


def daemonset() -> dict[str, Any]:
    doc = yamlish.load(DAEMONSET.read_text())
    assert isinstance(doc, dict)
    return doc


def containers() -> list[dict[str, Any]]:
    return daemonset()["spec"]["template"]["spec"]["containers"]


def _mapping(node: object, where: str) -> dict[str, Any]:
    assert isinstance(node, dict), f"{where} must be a mapping, is {node!r}"
    return node


def _list(node: object, where: str) -> list[Any]:
    assert isinstance(node, list) and node, f"{where} must be a non-empty list, is {node!r}"
    return node


def test_the_daemonset_has_the_fields_kubernetes_requires() -> None:
    doc = daemonset()
    assert doc["apiVersion"] == "apps/v1" and doc["kind"] == "DaemonSet"
    assert _DNS_LABEL.match(_mapping(doc["metadata"], "metadata")["name"])
    spec = _mapping(doc["spec"], "spec")
    match = _mapping(_mapping(spec["selector"], "spec.selector")["matchLabels"], "matchLabels")
    assert match, "spec.selector.matchLabels is empty"
    template = _mapping(spec["template"], "spec.template")
    labels = _mapping(_mapping(template["metadata"], "template.metadata")["labels"], "labels")
    assert match.items() <= labels.items(), "the selector does not select the pod template"
    pod = _mapping(template["spec"], "template.spec")
    volumes = {}
    for volume in _list(pod["volumes"], "volumes"):
        volume = _mapping(volume, "a volume")
        assert _DNS_LABEL.match(volume["name"]) and volume["name"] not in volumes
        sources = set(volume) - {"name"}
        assert len(sources) == 1 and sources <= _VOLUME_SOURCES, volume
        volumes[volume["name"]] = volume
    names = set()
    for container in _list(pod["containers"], "containers"):
        container = _mapping(container, "a container")
        assert _DNS_LABEL.match(container["name"]) and container["name"] not in names
        names.add(container["name"])
        assert isinstance(container["image"], str) and container["image"]
        assert all(isinstance(a, str) for a in container.get("args", []))
        for env in container.get("env", []):
            assert isinstance(env["name"], str) and isinstance(env["value"], str), env
        for port in container.get("ports", []):
            for key in ("containerPort", "hostPort"):
                assert key not in port or (isinstance(port[key], int) and 0 < port[key] < 65536), (
                    port
                )
            assert port.get("protocol", "TCP") in ("TCP", "UDP", "SCTP"), port
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes, f"volumeMount {mount['name']!r} names no volume"
            assert mount["mountPath"].startswith("/"), mount


def test_the_daemonsets_image_is_never_pulled_from_a_public_registry() -> None:
    for container in containers():
        image = container["image"]
        registry = image.split("/", 1)[0] if "/" in image else ""
        # A name without a registry host (joule-bench:latest) means docker.io.
        assert registry == "localhost" or registry.endswith(".invalid"), (
            f"{image} resolves to a public registry"
        )
        assert container.get("imagePullPolicy") == "Never", (
            f"{image}: imagePullPolicy {container.get('imagePullPolicy')!r} lets the "
            "kubelet pull it"
        )
        assert not image.endswith(":latest")
    (build,) = [r for r in documented_runs() if r[:2] == ["docker", "build"]]
    assert {c["image"] for c in containers()} == {build[build.index("-t") + 1]}


def test_the_daemonsets_command_line_starts_serve() -> None:
    entry = docker_argv("ENTRYPOINT")
    for container in containers():
        env = {e["name"]: e["value"] for e in container.get("env", [])}
        config = serve_config(entry[2:] + container.get("args", []), {**docker_env(), **env})
        if config.min_isolation == "bwrap":
            security = container.get("securityContext", {})
            assert "SYS_ADMIN" in security.get("capabilities", {}).get("add", [])
            assert security.get("seccompProfile", {}).get("type") in ("Unconfined", "Localhost")
            assert security.get("appArmorProfile", {}).get("type") in ("Unconfined", "Localhost")


# -- one socket path ------------------------------------------------------------------------


def readme_fleet_unix_targets() -> list[str]:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## A fleet of metered hosts", 1)[1].split("\n## ", 1)[0]
    return re.findall(r'target\s*=\s*"unix:([^"]+)"', section)


def test_the_readmes_fleet_socket_is_the_one_the_deploy_files_listen_on() -> None:
    (unit_socket,) = listen_unix(unit_serve_argv())
    targets = readme_fleet_unix_targets()
    assert targets, "the README's fleet example names no unix: target"
    assert set(targets) == {unit_socket}, (targets, unit_socket)
    for container in containers():
        assert listen_unix(container.get("args", [])) == [unit_socket]


# -- the manifest reader itself -------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    ["a: &x 1\nb: *x\n", "a: |\n  text\n", "a: 1\n---\nb: 2\n", "a: {b: 1\n", "a: 1\na: 2\n"],
)
def test_the_manifest_reader_refuses_what_it_does_not_read(source: str) -> None:
    with pytest.raises(yamlish.YamlishError):
        yamlish.load(source)


def test_a_misspelt_option_in_a_deploy_command_line_is_refused() -> None:
    with pytest.raises(Exception, match="No such option: --min-isolaton"):
        serve_config(["--min-isolaton", "process"], {})
    with pytest.raises(Exception, match="--min-isolation 'none'"):
        serve_config(["--min-isolation", "none"], {})
