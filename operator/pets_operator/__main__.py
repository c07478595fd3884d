import sys

from pets_operator.cli import main

sys.exit(main())
