"""Tests of the MetaService: versions, readers, REST API, consistency checker."""
