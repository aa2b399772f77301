import sys

from gateway.cli.launch import main

sys.exit(main())
