"""`python -m braze` runs the command-line interface."""
from braze.cli import main

raise SystemExit(main())
