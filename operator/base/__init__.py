"""What every part of the operator stands on: settings, the engine, metrics, Events, budgets."""
