"""Operator queries and actions: each returns data and prints nothing; `cli/` prints."""
