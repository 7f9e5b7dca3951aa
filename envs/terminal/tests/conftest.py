"""Fixture tasks hold the tasks' own checkers (test_outputs.py...), run inside episodes: data here, not tests of gem."""

collect_ignore_glob = ["container_tasks/*", "container_lang_tasks/*", "fixtures/*"]
