"""Where the daemon keeps its ledger, key and socket unless told otherwise.

Names only, apart from `jouled.config` (which reads them, and the environment), so
that `jb-client` can say where it dials without loading the daemon's config.
"""

from __future__ import annotations

# The environment variable that names the data dir.
HOME_VARIABLE = "JOULED_HOME"
# The data dir when that is not set.
DEFAULT_HOME = "~/.local/share/jouled"
# The daemon's Unix socket in its data dir.
SOCKET_NAME = "jouled.sock"
