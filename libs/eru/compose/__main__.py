"""`python -m eru.compose …`: a container's process (eru.compose.entry) or the secrets commands (eru.compose.cli)."""

import sys

if len(sys.argv) > 1 and sys.argv[1] in ("secrets", "client-env"):
    from eru.compose.cli import main
else:
    from eru.compose.entry import main

sys.exit(main())
