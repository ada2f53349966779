"""blockpilot-hf."""
