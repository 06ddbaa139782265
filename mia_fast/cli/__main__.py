import sys

from mia_fast.cli.main import main

sys.exit(main())
