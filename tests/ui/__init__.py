"""Tests of the UI views in a real Airflow, through headless Chromium."""
