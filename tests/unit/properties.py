"""The hypothesis settings of the unit property tests: the same examples on every run, and few of them.

``derandomize=True`` draws the examples from a seed fixed by the test itself, and ``database=None``
keeps no failures from earlier runs, so CI and a laptop run exactly the same cases and a failure
reproduces by running the test again. ``deadline=None``: a slow example on a busy CI machine is not
a failure (each test's size is bounded by ``max_examples`` instead, a few hundred at most, so every
property file runs in a few seconds). The strategies for JSON values are here too, shared by the
codec's and the decoder's properties.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st


def quick(max_examples: int) -> settings:
    """Settings for a property test of pure code: deterministic, no database, no deadline."""
    return settings(max_examples=max_examples, derandomize=True, database=None, deadline=None)


#: A JSON scalar as msgspec decodes it back (64-bit integers, finite floats).
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
#: Any JSON value, a few levels deep.
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=8,
)
#: A JSON object (params, a result, an error, tool arguments).
JSON_OBJECTS: st.SearchStrategy[dict[str, Any]] = st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4)
