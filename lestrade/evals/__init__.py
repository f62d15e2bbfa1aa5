"""The investigation scenario suite (`make eval`): scenarios, staging, the scripted investigator,
evidence recall, and the judged model mode. See README "Evaluating investigations"."""
