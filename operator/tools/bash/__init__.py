"""The `bash` tool: parsed argv pipelines, per-program grammars, policy tiers, a Landlock sandbox."""
