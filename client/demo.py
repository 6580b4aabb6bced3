"""`make demo`: the main job end to end on a throw-away data dir and the bundled tasks.

Starts a real `jouled serve`, runs the reference and noop solvers over the
smoke suite, prints the frontier, submits one patch from a "remote agent",
exports the ledger and verifies it offline with the public key alone.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from jb_client.api import Client

from jouled.config import bundled_tasks


def say(text: str) -> None:
    print(f"\n\033[1m{text}\033[0m", flush=True)


def jb(target: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    print(f"$ jb-client {' '.join(shlex.quote(a) for a in args)}", flush=True)
    done = subprocess.run([sys.executable, "-m", "jb_client", "--target", target, *args], text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"demo: jb-client {args[0]} exited {done.returncode}")
    return done


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="jouled-demo-"))
    data = home / "data"
    target = f"unix:{data / 'jouled.sock'}"
    tasks = bundled_tasks()
    say(f"Starting jouled on {target} (data dir {data})")
    argv = [
        sys.executable,
        "-m",
        "jouled",
        "serve",
        "--data-dir",
        str(data),
        "--tasks",
        str(tasks),
        "--calibrate-seconds",
        os.environ.get("DEMO_CALIBRATE_SECONDS", "3"),
    ]
    print("$ jouled " + " ".join(shlex.quote(a) for a in argv[3:]), flush=True)
    daemon = subprocess.Popen(argv)
    try:
        with Client(target) as client:
            client.wait_ready(120, alive=lambda: daemon.poll() is None)
        jb(target, "meter")
        jb(target, "tasks", "--suite", "smoke")

        say("Running the reference (ceiling) and noop (floor) solvers over the smoke suite")
        jb(target, "run", "--suite", "smoke", "--solvers", "reference,noop")

        say("A remote agent fetches a task, fixes it, and submits the patch")
        work = home / "agent"
        jb(target, "fetch", "--task", "smoke/lrucache", "--out", str(work / "a"))
        (work / "a" / "PROMPT.md").unlink()
        shutil.copytree(work / "a", work / "b")
        shutil.copytree(tasks / "smoke" / "lrucache" / "reference", work / "b", dirs_exist_ok=True)
        patch = subprocess.run(["diff", "-ruN", "a", "b"], cwd=work, capture_output=True)
        (work / "fix.patch").write_bytes(patch.stdout)
        jb(
            target,
            "submit",
            "--task",
            "smoke/lrucache",
            "--patch",
            str(work / "fix.patch"),
            "--solver",
            "demo-agent",
            "--model",
            "hand-written",
            "--usd-micros",
            "1200",
        )

        say("The frontier: resolution vs energy per solver")
        jb(target, "frontier", "--suite", "smoke")

        say("An auditor exports the ledger and verifies it offline with the public key")
        export = home / "ledger.jsonl"
        jb(target, "export", "--out", str(export))
        jb(target, "verify", str(export), "--pubkey", str(data / "jouled.pub"))
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=60)
    if code != 0:
        raise SystemExit(f"demo: jouled exited {code}")
    say(f"Done. Everything is under {home} (delete it when you like).")


if __name__ == "__main__":
    main()
