"""Scoring and frequency counting on a Ray cluster (``pip install 'mia-fast[ray]'``); Ray is imported only inside
the functions that use it.

- ``session``: Ray found and connected (or started here), a cluster address that does not answer refused quickly
- ``shards``: a ``score --ray`` run on disk: its shards of whole blocks and the manifest a rerun resumes from
- ``scoring``: ``score_on_ray``: the shards scored by model actors in a Ray Data pipeline, then merged into OUT
- ``counting``: ``build_on_ray``: each corpus file of a frequency-table build counted in a Ray task of its own
"""

from mia_fast.cluster.counting import build_on_ray
from mia_fast.cluster.scoring import RayConfig, score_on_ray
from mia_fast.cluster.session import check_address, ray_session, require_ray

__all__ = ["RayConfig", "build_on_ray", "check_address", "ray_session", "require_ray", "score_on_ray"]
