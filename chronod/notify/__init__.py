"""Telling owners what their jobs did and did not do: decisions (core), outbox and delivery (service)."""
