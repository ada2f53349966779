"""Drafter training: regenerate data with the target, cache its features, train a DFlash drafter."""
