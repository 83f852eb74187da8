"""Starts a real ``skill-runner serve`` for the tests: temp data dir, temp socket.

The binary is ``$SKILL_RUNNER_BIN``, else ``target/debug/skill-runner`` of
this repository (``scripts/test-clients`` builds it). Commands run in real
bubblewrap sandboxes; nothing here mocks the daemon.
"""

import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

REPO = Path(__file__).resolve().parents[3]
PATIENCE = 60.0  # hang protection only; nothing asserts on time

# Environment the daemon must not inherit from a developer's shell.
_SETTINGS = [
    "SKILL_RUNNER_TOKEN", "SKILL_RUNNER_SOCKET", "SKILL_RUNNER_LISTEN",
    "SKILL_RUNNER_CONFIG", "SKILL_RUNNER_ROOTS", "SKILL_RUNNER_DATA_DIR",
]


def runner_bin() -> str:
    path = os.environ.get("SKILL_RUNNER_BIN") or str(REPO / "target" / "debug" / "skill-runner")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is not an executable skill-runner; run cargo build -p skill-runner or set SKILL_RUNNER_BIN")
    return path


class Daemon:
    """One daemon process and its temp folder; :meth:`stop` ends it."""

    def __init__(self, tcp: bool = False, token: Optional[str] = None, extra: Sequence[str] = ()) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="sr-client-")
        base = Path(self.dir.name)
        # A root runner's sandbox user must pass through the folders above the data dir.
        base.chmod(0o755)
        self.data_dir = base / "data"
        self.socket_path: Optional[str] = None
        self.url: Optional[str] = None
        self.token = token
        args: List[str] = [runner_bin(), "--data-dir", str(self.data_dir), "serve"]
        if tcp:
            args += ["--listen", "127.0.0.1:0"]
        else:
            args += ["--socket", str(base / "run" / "api.sock")]
        if token is not None:
            token_file = base / "token"
            token_file.write_text(token + "\n")
            token_file.chmod(0o600)
            args += ["--token-file", str(token_file)]
        args += list(extra)
        env = {k: v for k, v in os.environ.items() if k not in _SETTINGS}
        env["SKILL_RUNNER_LOG"] = "info"
        self.log_path = base / "daemon.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log, env=env, cwd=base
        )
        deadline = time.monotonic() + PATIENCE
        while True:
            m = re.search(r"listening on (unix:|http://)(\S+)", self.log())
            if m:
                if m.group(1) == "unix:":
                    self.socket_path = m.group(2).strip('"')
                else:
                    self.url = "http://" + m.group(2).strip('"')
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log()
                self.stop()
                raise RuntimeError(f"skill-runner serve did not start:\n{log}")
            time.sleep(0.02)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.dir.cleanup()
