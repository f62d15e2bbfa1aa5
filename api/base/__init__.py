"""What every endpoint shares: authentication, body limits, the shared watch, following a run."""
