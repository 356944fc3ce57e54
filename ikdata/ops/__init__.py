"""Operations over a dataset: validate, stats, lineage, diff, gc, inspect."""
