"""Tests of the orchestration: operators, sensor, trigger, task group."""
