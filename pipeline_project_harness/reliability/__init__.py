"""Fault trials on throw-away loopback stacks: what is killed or cut, and how loss and duplication are counted."""
