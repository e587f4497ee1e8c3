import sys

from rubin.cli import main

sys.exit(main())
