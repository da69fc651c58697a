"""Differential checks against Debian's real cron daemon (generators and the live runner)."""
