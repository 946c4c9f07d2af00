"""Property-testing helpers (placeholder)."""
