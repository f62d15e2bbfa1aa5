"""HolmesGPT's API (references 000 and 001): chat, investigate, their events and SSE streams."""
