"""The agent-harness chat API (reference 003): requests, relays and harness events."""
