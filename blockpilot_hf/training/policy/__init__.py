"""BlockPilot policy training: collect runs at every block size, fit the head, evaluate it."""
