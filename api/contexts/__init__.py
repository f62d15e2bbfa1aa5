"""The context store (reference 004): contexts are Conversations, messages are transcript records."""
