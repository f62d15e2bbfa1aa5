"""What starts runs without a person: schedules and Kubernetes Warning Events."""
