"""`--ray` on a small or slow-to-report cluster (issue 29): a cluster with fewer CPUs than a slot still gets
one actor, more actors than CPUs get fractional shares (all scheduled), and the resource table is waited
for (bounded) when it comes back without its CPU entry right after ray.init. No Ray needed: the table is
all these functions read."""

from __future__ import annotations

import pytest

from fasttts_cli.app.fleet_ray import actor_shares, wait_for_resources
from fasttts_cli.errors import UsageError


class _Cluster:
    """Answers cluster_resources() with each table in turn, then the last one for ever."""

    def __init__(self, *tables: dict[str, float]) -> None:
        self.tables, self.calls = list(tables), 0

    def cluster_resources(self) -> dict[str, float]:
        self.calls += 1
        return self.tables.pop(0) if len(self.tables) > 1 else self.tables[0]


def test_the_table_is_waited_for_until_it_reports_cpus() -> None:
    cluster = _Cluster({"memory": 1e9}, {"memory": 1e9}, {"CPU": 2.0, "memory": 1e9})
    assert wait_for_resources(cluster, timeout=30, poll=0.01)["CPU"] == 2.0
    assert cluster.calls == 3


def test_the_wait_is_bounded_and_a_cluster_without_cpus_says_what_to_do() -> None:
    table = wait_for_resources(_Cluster({"memory": 1e9}), timeout=0.2, poll=0.01)
    with pytest.raises(UsageError) as e:
        actor_shares(table, gpu=False, n=None)
    assert "reports no CPU" in e.value.message and "--workers 1" in (e.value.hint or "")


@pytest.mark.parametrize(
    ("cpus", "workers", "want"),
    [
        (2.0, None, (1, 2.0)),  # fewer CPUs than a slot: still one actor
        (1.0, None, (1, 1.0)),
        (16.0, None, (4, 4.0)),
        (10.0, None, (2, 5.0)),
        (2.0, 4, (4, 0.5)),  # more actors than CPUs: each a fractional share, all scheduled
        (8.0, 3, (3, 2.0)),
    ],
)
def test_actor_shares(cpus: float, workers: int | None, want: tuple[int, float]) -> None:
    assert actor_shares({"CPU": cpus}, gpu=False, n=workers) == want


def test_a_gpu_pool_on_a_cluster_without_gpus_is_exit_2_with_a_hint() -> None:
    assert actor_shares({"CPU": 8.0, "GPU": 2.0}, gpu=True, n=None) == (2, 1.0)
    with pytest.raises(UsageError) as e:
        actor_shares({"CPU": 8.0}, gpu=True, n=None)
    assert e.value.exit_code == 2 and "no GPU" in e.value.message and "--num-gpus" in (e.value.hint or "")
