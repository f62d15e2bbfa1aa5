"""`kubectl lestrade`: Investigations and Conversations from the terminal, as the kubeconfig's
user, through the resources alone (no Lestrade API needed). See `__main__.py` for the commands."""
