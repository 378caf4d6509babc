"""The ranking: the most novel photos of a feature matrix or of the cache read in chunks.

``driver`` (:func:`~novelfind.ranking.driver.rank` and ``Ranking``: one method's scores read into picks and
moments), ``methods`` (one ``Method`` record per ranking method, its settings and its scorer), ``scoring``
(what every scorer is given), ``eventknn``, ``microclusters``, ``solver`` (ADS, the paper's Algorithm 1)
with ``adsconfig``, ``knn`` and ``cells`` (certified k nearest neighbours), ``events`` (capture times into
events and bursts), ``moments``, ``pca``, ``sources`` and ``budget`` (in memory or in chunks). Named
``ranking`` rather than ``rank``: a subpackage ``novelfind.rank`` would hide the function ``novelfind.rank``.
"""
