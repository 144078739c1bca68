"""fedcore-pruning: structured submodels of a timm-named ViT (depth window, heads, hidden units, exits),
their extraction and exact scattering, cost counters, FedRolex/HeteroFL index rules and the masked
weighted-delta aggregation."""
