import sys

from autotune.cli import main

sys.exit(main())
