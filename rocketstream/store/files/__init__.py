"""The store's files, one class per kind as in RocketMQ: ``MappedFile``/``MappedFileQueue``, ``CommitLog``,
``ConsumeQueue``, ``StoreCheckpoint``, ``IndexFile``, the writer lock, and the one place OS errors become
our error tree (``durable``)."""
