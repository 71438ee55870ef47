"""One-off investigations behind figures the README and docs cite: run as ``python -m investigations.NAME``.

Not the benchmark (``bench/``) and not the product (``ext_tasks/``, ``migration/``): each answers one
question once (a hardening figure, a profile, an instruction count, a micro-benchmark of one codec) and is
kept so the cited figure can be reproduced.
"""
