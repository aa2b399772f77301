import sys

from gateway.launch import main

sys.exit(main())
