"""The accuracy guard: its statistics, its record, its decisions, the one planner of
accuracy time and, apart, its words."""
