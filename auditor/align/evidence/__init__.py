"""Readers of what an engine run leaves behind: logs, profiler kernel tables, benchmark results.

Each reader is small, never raises on a line it does not understand (it just skips it), and
raises AuditInputError only when a whole file cannot be read."""
