"""How a run shows in its resource's status: the projection per kind and the coalesced writer."""
