"""Stream glue: channel forks and concatenations of pixel streams."""
