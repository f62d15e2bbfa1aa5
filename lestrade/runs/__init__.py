"""What every process knows about a run: its transcript, progress, summary and views."""
