"""Connected components of a graph held as a DataFrame of edges, by the large-star / small-star iterations
of Kiveris, Lattanzi, Mirrokni, Rastogi and Vassilvitskii, "Connected Components in MapReduce and Beyond"
(SoCC 2014), in Spark's DataFrame API (no GraphFrames).

Each node's label converges to the smallest node of its component. *Large-star* links every neighbour
larger than a node to the smallest node of that node's neighbourhood; *small-star* links a node and its
smaller neighbours to the smallest of them. A round of both keeps the components and shrinks the graph
toward one star per component, centred on its smallest node, in a logarithmic number of rounds; the
iterations stop when a round changes no edge. Each round's edges are checkpointed, so the plan of round
*n* does not carry the *n* rounds before it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

#: Rounds after which the iterations stop with an error rather than run on (they converge in
#: O(log² n) rounds; 2^64 nodes need far fewer than this).
MAX_ROUNDS = 200


def _large_star(edges: DataFrame) -> DataFrame:
    both = edges.select(F.col("a").alias("u"), F.col("b").alias("v")).union(
        edges.select(F.col("b").alias("u"), F.col("a").alias("v"))
    )
    smallest = both.groupBy("u").agg(F.least(F.min("v"), F.col("u")).alias("m"))
    return (
        both.join(smallest, "u")
        .where(F.col("v") > F.col("u"))
        .select(F.col("v").alias("a"), F.col("m").alias("b"))
        .distinct()
    )


def _small_star(edges: DataFrame) -> DataFrame:
    down = edges.select(F.greatest("a", "b").alias("u"), F.least("a", "b").alias("v"))
    smallest = down.groupBy("u").agg(F.least(F.min("v"), F.col("u")).alias("m"))
    linked = down.join(smallest, "u")
    return (
        linked.select(F.col("v").alias("a"), F.col("m").alias("b"))
        .union(linked.select(F.col("u").alias("a"), F.col("m").alias("b")))
        .where(F.col("a") != F.col("b"))
        .distinct()
    )


def connected_components(edges: DataFrame) -> DataFrame:
    """``(node, component)`` for every node of ``edges`` (columns ``a`` and ``b``, long), the component
    being its smallest node."""
    current = (
        edges.select(F.greatest("a", "b").alias("a"), F.least("a", "b").alias("b"))
        .where(F.col("a") != F.col("b"))
        .distinct()
        .localCheckpoint()
    )
    size = current.count()
    for _ in range(MAX_ROUNDS):
        after = _small_star(_large_star(current)).localCheckpoint()
        after_size = after.count()
        if after_size == size and after.exceptAll(current).isEmpty():
            current = after
            break
        current, size = after, after_size
    else:
        raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} rounds")
    # Converged: every edge joins a node to its component's smallest node.
    return (
        current.select(F.col("a").alias("node"), F.col("b").alias("component"))
        .union(current.select(F.col("b").alias("node"), F.col("b").alias("component")))
        .distinct()
    )
