"""Delta Sharing: the protocol server over the topologies (:mod:`.routes`), its recipients'
authentication (:mod:`.auth`), file URLs (:mod:`.files`, :mod:`.presign`) and the protocol's
model of shares, schemas and tables (:mod:`.model`)."""
