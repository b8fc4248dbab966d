"""FineWeb-2 rehydration weights from duplicate-cluster counts, and the repeat hook (pure logic)."""

from pipeline_project.cleaning.rehydration import RehydrationConfig, cluster_size, rehydrate, weight, weight_table

ON = RehydrationConfig(enabled=True)


def test_fineweb2_weights_upsample_moderate_clusters_not_huge_ones():
    sizes = [1, 2, 3, 4, 5, 99, 100, 999, 1000, 50_000]
    assert [weight(n, ON) for n in sizes] == [1, 2, 3, 3, 5, 5, 8, 8, 1, 1]
    assert all(weight(n) == 1 for n in sizes)  # off by default


def test_cluster_size_and_table_and_hook():
    assert cluster_size(2, 1) == 4 and cluster_size(2, 1, count_near=False) == 3
    table = weight_table({"a": (0, 0), "b": (1, 0), "c": (2, 2)}, ON)
    assert table == {"a": 1, "b": 2, "c": 5}
    out = [r["id"] for r in rehydrate([{"id": "a"}, {"id": "b"}, {"id": "x"}], table)]
    assert out == ["a", "b", "b", "x"]
