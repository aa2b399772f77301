"""`python -m gateway.cli`, as units written by earlier versions start it; the same as `python -m gateway`
and the `chatgate` script (gateway/cli/launch.py)."""

import sys

from gateway.cli.launch import main

sys.exit(main())
