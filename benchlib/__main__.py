"""`python -m benchlib`."""

from benchlib.cli import main

raise SystemExit(main())
