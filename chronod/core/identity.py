"""The identity formulas live in chronod.core.occurrence; these names stay importable from
here for code written against this module. Nothing is computed here."""

from chronod.core.occurrence import jitter_offset, job_key, run_id, utc_stamp

__all__ = ["jitter_offset", "job_key", "run_id", "utc_stamp"]
