"""Who speaks when: cue embeddings grouped into speakers, with a confidence per cue (numpy, scikit-learn).

Clustering: scikit-learn's AgglomerativeClustering, cosine distance, average linkage (a cluster's distance to
another is the mean pairwise distance, so one odd cue does not chain two speakers together).

The number of speakers, when not forced: each k from 2 to min(MAX_SPEAKERS, cues - 1) is tried and the k
with the highest mean silhouette (cosine) is kept; if even that best silhouette is under MIN_SILHOUETTE
(0.25), the cues are taken as one speaker (no split shows substantial structure). Silhouettes are a ratio
of distances, so the rule does not depend on an encoder's scale. With two cues no silhouette exists: one
speaker unless `--speakers 2`.

Confidence of a cue: the cosine similarity of its embedding to its own speaker's centroid minus the
similarity to the nearest other speaker's centroid (centroids: the mean of the unit embeddings, re-normed;
the cue counts in its own). Positive: nearer its own speaker; near 0: a toss-up; it lies in [-2, 2]. With
one speaker there is no other centroid, and the confidence is the similarity to its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fasttts_cli.errors import MissingDependencyError

MAX_SPEAKERS = 10
# Kaufman & Rousseeuw's reading of the mean silhouette: under 0.25, "no substantial structure". Measured
# (scripts/cast_bench.py, Resemblyzer): one speaker's cues split at best to 0.14, the two-speaker sample
# to 0.50.
MIN_SILHOUETTE = 0.25


@dataclass(frozen=True)
class Clustering:
    labels: list[int]  # per cue, 0..k-1, numbered in order of each speaker's first cue
    confidence: list[float]  # per cue, see the module doc
    speakers: int
    rule: str  # how the number of speakers was chosen, for the report
    silhouettes: dict[int, float]  # k -> mean silhouette, for each k tried (empty when forced)


def _sklearn() -> tuple[Any, Any]:
    try:
        from sklearn.cluster import AgglomerativeClustering
        from sklearn.metrics import silhouette_score
    except ImportError as e:
        raise MissingDependencyError(
            f"`fasttts cast` clusters voices with scikit-learn ({e.name or e})",
            hint="pip install 'fasttts-cli[cast]'",
        ) from None
    return AgglomerativeClustering, silhouette_score


def _agglomerative(emb: np.ndarray, k: int) -> np.ndarray:
    agglomerative, _ = _sklearn()
    return agglomerative(n_clusters=k, metric="cosine", linkage="average").fit_predict(emb)


def _silhouette(emb: np.ndarray, labels: np.ndarray) -> float:
    _, silhouette_score = _sklearn()
    return float(silhouette_score(emb, labels, metric="cosine"))


def _renumber(labels: np.ndarray) -> np.ndarray:
    """Labels in order of first appearance: the first cue's speaker is 0."""
    order: dict[int, int] = {}
    for lab in labels:
        order.setdefault(int(lab), len(order))
    return np.array([order[int(lab)] for lab in labels], dtype=np.int64)


def centroids(emb: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    c = np.stack([emb[labels == j].mean(axis=0) for j in range(k)])
    return c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)


def confidences(emb: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    sims = emb @ centroids(emb, labels, k).T  # (n, k)
    own = sims[np.arange(len(labels)), labels]
    if k == 1:
        return own
    others = sims.copy()
    others[np.arange(len(labels)), labels] = -np.inf
    return own - others.max(axis=1)


def cluster_speakers(emb: np.ndarray, speakers: int | None = None) -> Clustering:
    """Group the rows of `emb` (unit vectors, one per cue) into speakers; `speakers` forces how many."""
    n = len(emb)
    silhouettes: dict[int, float] = {}
    if speakers is not None:
        k, rule = speakers, f"forced (--speakers {speakers})"
    elif n < 3:
        k, rule = 1, "two cues: too few to compare groupings (pass --speakers 2 to split them)"
    else:
        for kk in range(2, min(MAX_SPEAKERS, n - 1) + 1):
            silhouettes[kk] = round(_silhouette(emb, _agglomerative(emb, kk)), 4)
        best = max(silhouettes, key=lambda kk: (silhouettes[kk], -kk))
        if silhouettes[best] < MIN_SILHOUETTE:
            k, rule = 1, f"best silhouette {silhouettes[best]:.3f} (k={best}) < {MIN_SILHOUETTE}: one speaker"
        else:
            k, rule = best, f"highest silhouette {silhouettes[best]:.3f} over k=2..{max(silhouettes)}"
    labels = np.zeros(n, dtype=np.int64) if k == 1 else _renumber(_agglomerative(emb, k))
    conf = confidences(emb, labels, k)
    return Clustering([int(v) for v in labels], [round(float(c), 4) for c in conf], k, rule, silhouettes)


def agreement(found: list[int], truth: list[str]) -> float:
    """The share of cues whose found speaker matches the true one, under the best one-to-one renaming of
    found speakers to true ones (Hungarian assignment on the contingency table)."""
    from scipy.optimize import linear_sum_assignment  # scipy comes with scikit-learn

    names = sorted(set(truth))
    table = np.zeros((max(found) + 1, len(names)), dtype=np.int64)
    for f, t in zip(found, truth, strict=True):
        table[f, names.index(t)] += 1
    rows, cols = linear_sum_assignment(-table)
    return float(table[rows, cols].sum()) / len(truth)
