"""Commands of this feature register on ikdata.cli.app here."""
