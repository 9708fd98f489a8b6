"""What a broker does to a store besides puts and reads: recovery on open (``CommitLog.recoverNormally`` /
``recoverAbnormally``), retention (``CleanCommitLogService``), the consistency check, and the on-disk
layout a store directory may have (docs/store-format.md)."""
