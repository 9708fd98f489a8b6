"""The store's metadata: broker settings (``MessageStoreConfig`` / broker.conf), the topic config table
and the consumer offset tables (``ConsumerOffsetManager``, the client's ``LocalFileOffsetStore`` file)."""
