"""``python -m bench``: see :mod:`bench.run` and ``bench/README.md``."""

from .run import main

raise SystemExit(main())
