"""``python -m bench``: see bench/README.md."""

from .cli import main

raise SystemExit(main())
