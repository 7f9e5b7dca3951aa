"""The fixture tasks' own test files are the tasks' checkers, run inside episodes, not tests of gem."""

collect_ignore_glob = ["fixtures/*"]
