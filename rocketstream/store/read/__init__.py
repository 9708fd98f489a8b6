"""Reading: ``getMessage``-style queries and lookups (``queries``), the columnar bulk reader that builds
Arrow batches (``bulk_read``) and their schema (``schema``)."""
