"""The admission policies the operator installs: decisions and who asked."""
