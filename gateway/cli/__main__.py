"""`python -m gateway.cli`, as units written by earlier versions start it; `python -m gateway` is
the entry point now (it holds the collector off from the first import: gateway/launch.py)."""

import sys

from gateway.launch import main

sys.exit(main())
