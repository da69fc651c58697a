"""A deterministic simulation of chronod: the real daemon, a fake clock, simulated
processes and faults, and invariants checked from the simulation's own record."""
