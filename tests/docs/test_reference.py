"""The reference pages cover the API as it is: every RPC, its roles, every status code;
the README's command list, every command `jb-client` has."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import grpc
from jb_client.cli import COMMANDS, command_named

from jouled.api.server import STATUS
from jouled.auth import PERMISSIONS
from tests.docs.blocks import DOCS, blocks, pages

REPO = DOCS.parent
README = REPO / "README.md"
PROTO = REPO / "proto" / "jouled" / "v1" / "jouled.proto"
PROTOCOL = DOCS / "protocol.md"


def rpcs() -> list[str]:
    return re.findall(r"^\s*rpc (\w+)\(", PROTO.read_text(), flags=re.M)


def sections(text: str) -> dict[str, str]:
    """`### Name` sections of a page, by name."""
    parts = re.split(r"^### (\w+)\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_rpc_has_a_section_naming_who_may_call_it() -> None:
    documented = sections(PROTOCOL.read_text())
    for rpc in rpcs():
        assert rpc in documented, f"docs/protocol.md has no '### {rpc}' section"
        found = re.search(r"^Roles: ([\w, ]+)\.$", documented[rpc], flags=re.M)
        assert found, f"the {rpc} section does not say 'Roles: ...'"
        roles = {r.strip() for r in found.group(1).split(",")}
        allowed = {role for role, methods in PERMISSIONS.items() if rpc in methods}
        assert roles == allowed, f"{rpc}: the page says {sorted(roles)}, the daemon {allowed}"
    assert set(documented) <= set(rpcs()), "a section documents an RPC the proto lacks"


def test_the_roles_table_lists_what_each_role_may_call() -> None:
    text = PROTOCOL.read_text()
    for role in ("agent", "auditor"):
        row = re.search(rf"^\| `{role}` \| (.*) \|$", text, flags=re.M)
        assert row, f"no row for {role} in the roles table"
        listed = {m.strip() for m in row.group(1).split(",")}
        assert listed == set(PERMISSIONS[role]), role


def test_every_status_code_the_daemon_answers_is_explained() -> None:
    text = PROTOCOL.read_text()
    for code in {*STATUS.values(), grpc.StatusCode.DEADLINE_EXCEEDED}:
        assert f"`{code.name}`" in text, f"docs/protocol.md does not explain {code.name}"


def readme_commands() -> dict[str, str]:
    """The README's command list (its block of `jb-client ...` synopses): each command's
    synopsis, by the command it names."""
    listing = max(blocks(README), key=lambda b: b.text.count("\njb-client "))
    synopses: dict[str, str] = {}
    for line in listing.text.splitlines():
        if line.startswith("jb-client "):
            words = shlex.split(line, comments=True)[1:]
            name = command_named(words)
            if name is not None:
                synopses[name] = synopses.get(name, "") + line + "\n"
    return synopses


def test_the_readme_lists_every_command_with_its_json_option() -> None:
    listed = readme_commands()
    for name, _, _ in COMMANDS:
        assert name in listed, f"the README's command list has no `jb-client {name}` line"
        shown = subprocess.run(
            [sys.executable, "-m", "jb_client", name, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        if re.search(r"^  --json\b", shown, flags=re.M):  # an option of its own
            assert "--json" in listed[name], f"the README's `jb-client {name}` lacks --json"


def test_relative_links_between_pages_resolve() -> None:
    for page in pages():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_nothing_in_the_repository_points_to_a_design_file_outside_it() -> None:
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.split(b"\0")
    here = Path(__file__).resolve()
    pointers = []
    for name in filter(None, tracked):
        path = REPO / name.decode()
        if path.resolve() == here or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        pointers += [
            f"{name.decode()}:{n}"
            for n, line in enumerate(text.splitlines(), 1)
            if "DESIGN.md" in line
        ]
    assert not pointers, f"pointers to DESIGN.md: {pointers}"
