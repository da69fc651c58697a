"""Kept for the daemon loop until it reads `chronod.core.occurrence` directly."""

from chronod.core.occurrence import jitter_offset, job_key, run_id, utc_stamp

__all__ = ["jitter_offset", "job_key", "run_id", "utc_stamp"]
