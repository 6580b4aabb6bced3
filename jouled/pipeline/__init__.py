"""One attempt: seed, restore, sandbox, report parsing and grading, evaluate."""
