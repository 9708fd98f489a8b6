"""Putting messages: ``Message`` and its preparation (``messages``), batch puts (``put_batch`` rows,
``put_columns`` Arrow columns — both produce one ``ColumnarBatch``), and the dispatch of appended records
to consume queues (``CommitLogDispatcherBuildConsumeQueue``)."""
