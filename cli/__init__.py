"""The ``rangecast`` command line: one parser built from the subcommand modules."""
