import sys

from autotune._cli import main

sys.exit(main())
