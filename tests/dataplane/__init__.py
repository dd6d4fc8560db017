"""Tests of the data plane: Spark apps, Delta commits, crash and replay."""
