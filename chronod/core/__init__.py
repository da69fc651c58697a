"""The pure core: no I/O, no clock reads. Time is always an argument."""
