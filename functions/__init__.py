"""modelhooks: small stateless functions that react to model-lifecycle events.

Layers, top to bottom (each imports only those below it; `make lint` enforces it):
`main` / `cli` (entry points) → `bootstrap` (the composition root) → `delivery` (the HTTP
contract) → `handlers` (the functions) → `adapters` (backends) → `core` (errors, ports,
records, settings) → `events` (the canonical vocabulary). CONTRIBUTING.md has the map.
"""
