"""Where an app run by hand finds its tables: the Topology's convention (issue 11)."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.spark.model import Sink, TsbApp
from airflow_provider_tsb.topology import Topology


def test_warehouse_locations_match_the_topology(tmp_path) -> None:
    app = TsbApp("clean", {"raw.penguins": None}, {"zoo.penguins_clean": Sink()}, process=lambda ctx: {})
    topology = Topology("zoo", warehouse=str(tmp_path))
    topology.root_table("raw.penguins")
    topology.job("clean", "clean.py", sources=["raw.penguins"], sinks=["zoo.penguins_clean"])
    locations = app.resolve_locations(None, None, str(tmp_path))
    assert locations == {"raw.penguins": topology.location("raw.penguins"),
                         "zoo.penguins_clean": topology.location("zoo.penguins_clean")}
    assert locations["raw.penguins"] == str(tmp_path / "tsb" / "raw" / "penguins")
    # --table wins, under either spelling of the name
    assert app.resolve_locations(None, {"tsb.raw.penguins": "/data/p"}, str(tmp_path))["raw.penguins"] == "/data/p"
    with pytest.raises(ValueError, match="no location for table 'raw.penguins'"):
        app.resolve_locations(None, None, None)
