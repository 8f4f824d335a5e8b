"""The toolbox every stage shares: the dtype table, chunk grids, key tables,
checksums, strict JSON, basic-indexing selections, the thread pool, and the
bridge between torch tensors and numpy arrays. Nothing here knows about files."""
