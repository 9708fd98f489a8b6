"""Reading: ``getMessage``-style queries and lookups (``queries``) and the columnar bulk reader that builds
Arrow batches (``bulk_read``, with ``codec.arrow_records``'s column builder and schema), and the stored bytes
of consume-queue ranges a planner packs into tasks (``range_bytes``)."""
