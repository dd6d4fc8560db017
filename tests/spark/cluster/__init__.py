"""Tests on a real Spark standalone cluster whose executors have nothing of ours installed."""
