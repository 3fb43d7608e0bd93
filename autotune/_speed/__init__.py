"""The speed of configs measured side by side: the rounds' statistics and decisions."""
