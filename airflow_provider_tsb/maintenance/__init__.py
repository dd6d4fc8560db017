"""Maintenance of a topology's tables: snapshot expiry (:mod:`.expiry`) with retention policies
(:mod:`.retention`), revisions (rollbacks and reprocessing, :mod:`.revision`) and restoring a
lost metastore from the DAG files and the Delta logs (:mod:`.rebuild`)."""
