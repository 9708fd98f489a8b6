"""Reading: ``getMessage``-style queries and lookups (``queries``) and the columnar bulk reader that builds
Arrow batches (``bulk_read``, with ``codec.arrow_records``'s column builder and schema)."""
