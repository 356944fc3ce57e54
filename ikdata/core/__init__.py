"""The torch-free core every feature stands on: records, store, schemas, manifest, journal, definitions, trust."""
