"""Import: read foreign layouts, plan an import read-only, apply it through the journal."""
